"""The bundled environments of the other agent kinds: `tool-shell` (the shell tasks through
the tool-calling agent) and `game-2048` (the 2048 MCP server's taskset, HUD style)."""

from __future__ import annotations

from importlib import resources

from .base import Environment
from .loaders import load_hud
from .shell_tasks import load_shell_tasks

TOOL_SHELL = "tool-shell"
GAME_2048 = "game-2048"
GAME_2048_TASKS = "game2048_tasks.json"
# Every turn must be a call: a policy server that constrains `required` calls to the tools'
# schemas (the built-in one's grammar engine, vLLM's) makes even the 135M model's calls
# valid; unconstrained, it mostly writes prose (docs/benchmarks.md).
REQUIRED = "required"


def load_tool_shell() -> Environment:
    shell = load_shell_tasks()
    return Environment(
        TOOL_SHELL,
        "The shell tasks through OpenAI tool calling (bash, editor, submit)",
        shell.scenarios(),
        agent="tools",
        tools=("bash", "editor", "submit"),
        tool_choice=REQUIRED,
    )


def load_game_2048() -> Environment:
    with resources.as_file(resources.files(__package__).joinpath(GAME_2048_TASKS)) as path:
        hud = load_hud(str(path), name=GAME_2048)
    return Environment(
        GAME_2048,
        "2048 through its MCP server (artfleet-mcp-2048): reach the target tile",
        hud.scenarios(),
        agent="mcp",
        bad_records=hud.bad_records,
        tools=("move",),
        tool_choice=REQUIRED,
    )
