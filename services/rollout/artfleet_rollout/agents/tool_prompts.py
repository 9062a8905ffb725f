"""Prompts of the tool-calling agents.

Tools travel as OpenAI schemas (`art.Trajectory.tools`), rendered by the model's chat
template. SmolLM2's template has no tool section, so the system prompt also names the
tools and the Hermes call format, and one demonstrated exchange shows it (as the terminal
agent's does: a 135M model copies a shown format far better than a described one). The
demonstration is plain messages: ART never trains on it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

# A concrete call, not a template: the 135M model copies placeholders such as
# `{<arguments as JSON>}` literally (most sampled calls did: docs/benchmarks.md).
CALL_FORMAT = "Call a tool with exactly one block per call, for example:\n"

_TOOLS_PROMPT = (
    "You are an agent working in a Linux shell, in the task's directory. "
    "Use the tools to do the task, one call per reply. When it is done, call submit."
)
_MCP_PROMPT = (
    "You are an agent acting in an environment through its tools, one call per reply. "
    "When you are finished, reply with a short message and no tool call."
)

MCP_NUDGE = "Reply with one tool call."


def tool_list(tools: Sequence[dict[str, Any]]) -> str:
    lines = []
    for tool in tools:
        function = tool["function"]
        params = ", ".join(function.get("parameters", {}).get("properties", {}))
        summary = (function.get("description") or "").split(". ")[0].strip()
        lines.append(f"- {function['name']}({params}): {summary}")
    return "Tools:\n" + "\n".join(lines)


def _example_value(schema: dict[str, Any]) -> Any:
    if schema.get("enum"):
        return schema["enum"][0]
    return {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}.get(
        str(schema.get("type")), "ls" if not schema else "text"
    )


def example_call(tools: Sequence[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A well-formed call of the first tool: its required arguments with example values."""
    if not tools:
        return "tool", {}
    function = tools[0]["function"]
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") or {}
    required = parameters.get("required") or list(properties)[:1]
    return function["name"], {k: _example_value(properties.get(k) or {}) for k in required}


def system_text(kind: str, tools: Sequence[dict[str, Any]], task_prompt: str = "") -> str:
    """The job's task_prompt (or the agent's default), then the tools and the format."""
    head = task_prompt or (_MCP_PROMPT if kind == "mcp" else _TOOLS_PROMPT)
    return f"{head}\n{tool_list(tools)}\n{CALL_FORMAT}{call_text(*example_call(tools))}"


def mcp_demonstration(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One demonstrated call of the environment's first tool (its answer elided: a made-up
    board would be copied)."""
    if not tools:
        return []
    return [
        {"role": "user", "content": "Example: make one move."},
        {"role": "assistant", "content": call_text(*example_call(tools))},
        {"role": "tool", "tool_call_id": "demo_1", "content": "ok"},
    ]


def mcp_messages(
    tools: Sequence[dict[str, Any]], system: str, setup_text: str, instruction: str
) -> list[Any]:
    """An MCP episode's opening messages (the agent's, and the scripted expert's
    demonstrations, which must open exactly as the agent's episodes do)."""
    # The state first, the task last: right before its turn, a small model continues
    # whatever text it just read (a board, measured), not the instruction above it.
    state = f"{setup_text}\n" if setup_text else ""
    return [
        {"role": "system", "content": system_text("mcp", tools, system)},
        *mcp_demonstration(tools),
        {"role": "user", "content": f"{state}{instruction}\n{MCP_NUDGE}"},
    ]


def call_text(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def shell_demonstration() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Task: Create a file named notes.txt containing draft."},
        {"role": "assistant", "content": call_text("bash", {"command": "echo draft > notes.txt"})},
        {"role": "tool", "tool_call_id": "demo_1", "content": "exit_code: 0"},
        {"role": "assistant", "content": call_text("submit", {})},
        {"role": "tool", "tool_call_id": "demo_2", "content": "Submitted."},
    ]
