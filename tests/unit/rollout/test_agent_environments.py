"""The agent kinds' environments: game logic, generated math, the hud:/jsonl: loaders, and
`artfleet envs`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from artfleet_cli.main import app
from artfleet_rollout.agents.mcp_env import McpEndpoint, McpFailure, docker_run, transport
from artfleet_rollout.bundled.game2048 import Game
from artfleet_rollout.environments import get_environment
from artfleet_rollout.environments.loaders import LoaderError, load_hud, load_jsonl


def test_2048_moves_merge_and_reward_on_a_log_scale() -> None:
    game = Game(seed=1, target=64, board=[[2, 2, 4, 0], [0] * 4, [0] * 4, [0] * 4])
    assert game.move("left")
    assert game.board[0][:2] == [4, 4] and game.score == 4
    assert game.reward() == pytest.approx(2 / 6)  # log2(4) / log2(64)
    assert Game(seed=3).board == Game(seed=3).board  # seeded
    full = Game(board=[[2, 4, 2, 4], [4, 2, 4, 2], [2, 4, 2, 4], [4, 2, 4, 2]])
    assert not full.move("left") and not full.can_move()
    assert "no moves left" in full.render()
    with pytest.raises(ValueError, match="direction"):
        game.move("sideways")
    with pytest.raises(ValueError, match="power of two"):
        Game(target=100)


def test_bundled_environments_have_their_agents_and_splits() -> None:
    math = get_environment("math-single")
    assert math.agent == "single" and len(math.scenarios()) >= 200
    assert {s.difficulty for s in math.scenarios()} == {"d1", "d2", "d3", "d4", "d5"}
    assert all(s.answer.lstrip("-").isdigit() for s in math.scenarios())
    assert [s.answer for s in math.scenarios()] == [s.answer for s in math.scenarios()]
    game = get_environment("game-2048")
    assert game.agent == "mcp" and len(game.scenarios()) >= 20
    assert game.split_sizes()["test"] > 0 and game.split_sizes()["train"] > 0
    first = game.scenarios()[0]
    assert first.mcp is not None and first.mcp.setup is not None
    assert first.mcp.evaluate.name == "evaluate"
    tools = get_environment("tool-shell")
    assert (
        tools.agent == "tools"
        and tools.split_sizes() == get_environment("shell-tasks").split_sizes()
    )


def test_hud_loader_reads_tasks_and_counts_skipped_records(tmp_path: Path) -> None:
    good = {
        "prompt": "Play.",
        "mcp_config": {"hud": {"url": "http://example.invalid/mcp"}},
        "setup_tool": [{"name": "setup", "arguments": {"seed": 1}}],
        "evaluate_tool": {"name": "evaluate", "arguments": {"strict": True}},
    }
    named = {"type": "function", "function": {"name": "move"}}
    records = [
        good,
        {**good, "prompt": ""},
        {**good, "mcp_config": {}},
        "not an object",
        {**good, "id": "forced", "tool_choice": "required"},
        {**good, "id": "named", "tool_choice": named},
        {**good, "id": "bad-choice", "tool_choice": "always"},
    ]
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records))
    env = load_hud(str(path))
    assert env.agent == "mcp"
    assert [s.id for s in env.scenarios()] == ["task-0000", "forced", "named"]
    assert [s.tool_choice for s in env.scenarios()] == [None, "required", named]
    scenario = env.scenarios()[0]
    assert scenario.mcp is not None and scenario.mcp.setup is not None
    assert dict(scenario.mcp.setup.arguments) == {"seed": 1}
    assert env.skipped == {
        "no prompt": 1,
        "mcp_config must hold exactly one server": 1,
        "not a JSON object": 1,
        "tool_choice must be one of auto, required, none or {type: function, function: {name}}": 1,
    }
    assert [str(b) for b in env.bad_records.first] == [
        f"{path}:2: no prompt",
        f"{path}:3: mcp_config must hold exactly one server",
        f"{path}:4: not a JSON object",
        f"{path}:7: tool_choice must be one of auto, required, none or "
        "{type: function, function: {name}}",
    ]


def test_jsonl_loader_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    lines = [{"prompt": f"q{i}", "answer": i, "system": "s"} for i in range(5)]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    env = load_jsonl(str(path))
    assert env.split_sizes() == {"train": 4, "test": 1}
    assert env.scenarios()[2].answer == "2" and env.scenarios()[2].system == "s"
    with pytest.raises(LoaderError, match="no such file"):
        load_jsonl(str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.json"
    bad.write_text('[{"prompt": "a"},\n{"prompt" "b"}]')  # an array is one document
    with pytest.raises(LoaderError, match=f"^{bad}:2: not valid JSON"):
        load_jsonl(str(bad))
    bad.write_text('{"prompt": "a"}\n{"prompt": "b"')  # not one document: JSON lines
    assert [str(b) for b in load_jsonl(str(bad)).bad_records.first] == [
        f"{bad}:2: not valid JSON (Expecting ',' delimiter at column 15)"
    ]


def test_container_servers_go_through_the_sandbox_transport() -> None:
    assert docker_run("docker", ["run", "-i", "--rm", "hud/2048:1", "--fast"]) == (
        "hud/2048:1",
        ["--fast"],
    )
    assert docker_run("ssh", ["host", "docker", "run", "x"]) is None
    with pytest.raises(McpFailure, match="not supported"):
        docker_run("docker", ["run", "-v", "/:/host", "img"])
    seen: list[tuple[str, str, str, list[str]]] = []

    def fake(target: str, token: str, image: str, args: list[str]) -> Any:
        seen.append((target, token, image, args))
        return object()

    from artfleet_rollout.agents import mcp_env

    previous = mcp_env._docker_transport
    mcp_env.set_docker_transport(fake)
    try:
        endpoint = McpEndpoint("sandbox:50053", "tok", 5.0)
        transport({"local": {"command": "docker", "args": ["run", "-i", "img"]}}, endpoint)
        transport({"docker": {"image": "img2", "args": ["a"]}}, endpoint)
    finally:
        mcp_env.set_docker_transport(previous)
    assert seen == [("sandbox:50053", "tok", "img", []), ("sandbox:50053", "tok", "img2", ["a"])]
    with pytest.raises(McpFailure, match="exactly one server"):
        transport({}, McpEndpoint("", "", 1.0))


def test_envs_cli_lists_and_shows(tmp_path: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(app, ["envs", "list"])
    assert listed.exit_code == 0
    assert "game-2048" in listed.output and "bash, editor, submit" in listed.output
    shown = runner.invoke(app, ["envs", "show", "math-single", "d3-002"])
    assert shown.exit_code == 0 and '"answer"' in shown.output
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n{"answer": 1}\n')
    loaded = runner.invoke(app, ["envs", "show", f"jsonl:{path}"])
    assert loaded.exit_code == 0 and "skipped: 1 record(s): no prompt" in loaded.output
    unknown = runner.invoke(app, ["envs", "show", "nope"])
    assert unknown.exit_code == 2 and "unknown environment 'nope'" in unknown.output
    missing = runner.invoke(app, ["envs", "show", "math-single", "zz"])
    assert missing.exit_code == 2 and "no scenario 'zz'" in missing.output


def test_an_unreadable_loader_source_is_an_invalid_task(tmp_path: Path) -> None:
    from agent_fakes import task

    from artfleet.contracts.errors import InvalidArgument
    from artfleet_rollout.group import task_scenario

    with pytest.raises(InvalidArgument) as info:
        task_scenario(task(f"jsonl:{tmp_path / 'missing.jsonl'}", "x"))
    assert info.value.field == "task.environment" and "no such file" in str(info.value)
