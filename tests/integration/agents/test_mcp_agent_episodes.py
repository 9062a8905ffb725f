"""MCP agent episodes against real MCP servers over stdio (official SDK).

The policy here is scripted (these tests are about the MCP session: setup, tool calls,
evaluate in the same session, failures); the real SmolLM2 plays in the slow test.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import sys
import time
from importlib import resources
from pathlib import Path

import pytest
from agent_fakes import HalfReward, Script, connections, task, tool_call_text
from mcp import ClientSession, StdioServerParameters, stdio_client
from repo_paths import FIXTURES

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_rollout import metrics
from artfleet_rollout.agents.mcp_env import McpEndpoint, McpFailure, open_environment
from artfleet_rollout.environments import McpTask, ToolCallSpec, bundled_agents, get_environment
from artfleet_rollout.environments.loaders import load_hud
from artfleet_rollout.environments.registry import register_environment
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.settings import RolloutSettings

pytestmark = pytest.mark.integration

FAULTY = FIXTURES / "mcp_faulty_server.py"


_call = tool_call_text
MOVES = [_call("move", {"direction": d}) for d in ("left", "up", "right", "down")]


def _settings(timeout_s: float = 20.0) -> RolloutSettings:
    return RolloutSettings(api_token="t", mcp_timeout_s=timeout_s)  # type: ignore[arg-type]


async def _run(
    environment: str, scenario: str, script: list[str], timeout_s: float = 20.0
) -> tuple[rollout_pb2.RunGroupResponse, HalfReward]:
    reward = HalfReward()
    runner = GroupRunner(_settings(timeout_s), connect=connections(Script(script), reward=reward))
    await runner.start()
    try:
        return await runner.run(task(environment, scenario)), reward
    finally:
        await runner.stop()


async def test_2048_episode_evaluates_in_its_own_session(mcp_2048_on_path: Path) -> None:
    response, reward = await _run("game-2048", "2048-00", [*MOVES, "I am done."])
    assert len(response.episodes) == 2 and not response.group.exceptions
    for episode in response.episodes:
        assert episode.agent == "mcp" and episode.evaluated
        assert 0.0 < episode.evaluate_reward <= 1.0
        assert episode.finish == "max_turns"
        assert episode.tool_calls["move"] == 4
    # The rewards went to the reward service with the episodes that carry them.
    sent = reward.requests[0]
    assert [e.evaluate_reward for e in sent.episodes] == [
        e.evaluate_reward for e in response.episodes
    ]
    # The model saw tools (setup and evaluate hidden from it), and the setup board.
    traj = response.group.trajectories[0]
    assert [t["function"]["name"] for t in json.loads(traj.tools_json)] == ["move"]
    first_turn = next(i for i, m in enumerate(traj.messages_and_choices) if m.HasField("choice"))
    task_message = traj.messages_and_choices[first_turn - 1].message
    assert task_message.role == "user" and "target 32" in task_message.content


async def test_in_session_evaluate_equals_a_fresh_evaluate_call(mcp_2048_on_path: Path) -> None:
    scenario = get_environment("game-2048").get("2048-01")
    assert scenario.mcp is not None
    endpoint = McpEndpoint("", "", 20.0)
    async with open_environment(scenario.mcp, endpoint) as environment:
        await environment.start()
        for direction in ("left", "up", "left", "down", "right"):
            await environment.call("move", json.dumps({"direction": direction}))
        first = await environment.evaluate()
        again = await environment.evaluate()
    assert first == again
    # A fresh server with only setup would score the untouched board instead.
    params = StdioServerParameters(command="artfleet-mcp-2048")
    async with stdio_client(params) as streams, ClientSession(*streams) as session:
        await session.initialize()
        await session.call_tool("setup", dict(scenario.mcp.setup.arguments))  # type: ignore[union-attr]
        untouched = await session.call_tool("evaluate", {})
    assert untouched.structured_content is not None
    assert first.text and json.loads(first.text)["moves"] == 5
    assert untouched.structured_content["moves"] == 0


async def test_the_jobs_mcp_config_replaces_the_scenarios_server(
    tmp_path: Path, mcp_2048_on_path: Path
) -> None:
    # The bundled 2048 tasks with a server that cannot start: only the job's server (the
    # real 2048 server, named differently) makes these episodes run.
    bundled = resources.files(bundled_agents.__package__).joinpath(bundled_agents.GAME_2048_TASKS)
    tasks = json.loads(bundled.read_text())
    for record in tasks:
        record["mcp_config"] = {"gone": {"command": "/nonexistent/mcp-server"}}
    path = tmp_path / "gone.json"
    path.write_text(json.dumps(tasks))
    register_environment("gone-2048", lambda: load_hud(str(path), name="gone-2048"))
    job_server = json.dumps({"hud-2048": {"command": str(mcp_2048_on_path), "args": []}})
    reward = HalfReward()
    runner = GroupRunner(_settings(), connect=connections(Script([*MOVES]), reward=reward))
    await runner.start()
    try:
        response = await runner.run(task("gone-2048", "2048-00", mcp_config=job_server))
        without = await runner.run(task("gone-2048", "2048-00"))
    finally:
        await runner.stop()
    assert not response.group.exceptions, response.group.exceptions
    assert [e.evaluated for e in response.episodes] == [True, True]
    assert all(0.0 < e.evaluate_reward <= 1.0 for e in response.episodes)
    assert "MCP server 'gone' did not start" in without.group.exceptions[0].message


def _faulty(mode: str, tmp_path: Path) -> str:
    tasks = [
        {
            "id": "faulty",
            "split": "train",
            "prompt": "Move once.",
            "mcp_config": {"local": {"command": sys.executable, "args": [str(FAULTY), mode]}},
            "setup_tool": {"name": "setup"},
        }
    ]
    path = tmp_path / f"{mode.strip('-')}.json"
    path.write_text(json.dumps(tasks))
    name = f"faulty{mode}"
    register_environment(name, lambda: load_hud(str(path), name=name))
    return name


@pytest.mark.parametrize("mode", ["--crash", "--hang"])
async def test_a_failing_server_fails_the_episode_within_its_timeout(
    mode: str, tmp_path: Path
) -> None:
    name = _faulty(mode, tmp_path)
    before = metrics.FAILURES.labels("episode")._value.get()
    # The request limit also bounds the server's start: room for a loaded machine's Python.
    response, _ = await asyncio.wait_for(
        _run(name, "faulty", [_call("move", {"direction": "up"})], timeout_s=10.0), 120
    )
    assert not response.episodes and len(response.group.exceptions) == 2
    for exception in response.group.exceptions:
        assert exception.type == "McpFailure"  # the short class name
        assert "call_tool" in exception.message
        if mode == "--hang":  # ended by its request limit, not by the test's
            assert "no answer to call_tool in 10s" in exception.message
    assert metrics.FAILURES.labels("episode")._value.get() == before + 2


async def test_a_server_that_does_not_start_is_a_clear_failure() -> None:
    task = McpTask({"local": {"command": "/nonexistent/mcp-server"}}, ToolCallSpec("evaluate"))
    with pytest.raises(McpFailure, match="did not start"):
        async with open_environment(task, McpEndpoint("", "", 5.0)) as environment:
            await environment.start()


async def test_the_bundled_2048_server_starts_with_the_virtualenv_off_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fleet started as `.venv/bin/artfleet fleet up`: the console script's directory is
    # not on PATH; the script is found beside the interpreter instead.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert shutil.which("artfleet-mcp-2048") is None
    scenario = get_environment("game-2048").get("2048-00")
    assert scenario.mcp is not None
    async with open_environment(scenario.mcp, McpEndpoint("", "", 20.0)) as environment:
        assert "target 32" in await environment.start()


async def test_an_unreachable_ssh_host_is_named_in_the_failure() -> None:
    # HUD's remote form; `.invalid` never resolves (RFC 6761). ssh says why on stderr, and
    # that, not the SDK's "Connection closed", is the failure the user reads.
    server = {"command": "ssh", "args": ["-o", "BatchMode=yes", "nohost.invalid", "docker"]}
    task = McpTask({"remote": server}, ToolCallSpec("evaluate"))
    with pytest.raises(McpFailure) as info:
        async with open_environment(task, McpEndpoint("", "", 20.0)) as environment:
            await environment.start()
    message = str(info.value)
    assert message.startswith("MCP server 'remote' did not start: ")
    assert "nohost.invalid" in message and "Connection closed" not in message


async def test_a_server_that_dies_mid_episode_shows_its_stderr(tmp_path: Path) -> None:
    name = _faulty("--crash", tmp_path)
    scenario = get_environment(name).get("faulty")
    assert scenario.mcp is not None
    with pytest.raises(McpFailure) as info:
        async with open_environment(scenario.mcp, McpEndpoint("", "", 10.0)) as environment:
            await environment.start()
            await environment.call("move", json.dumps({"direction": "up"}))
    assert "call_tool" in str(info.value) and "crashing on purpose" in str(info.value)


def test_episode_record_fields_are_the_proto_s() -> None:
    episode = pb.Episode(agent="mcp", evaluated=True, evaluate_reward=0.5)
    assert pb.Episode.FromString(episode.SerializeToString()) == episode


NOISY = FIXTURES / "mcp_noisy_server.py"


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status


async def test_a_server_flooding_stdout_is_stopped_with_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A server that logs to stdout: every line is no protocol. It used to run until the
    # request's timeout, the SDK logging a traceback per line meanwhile (2.6 MB/s).
    pidfile = tmp_path / "pid"
    server = {"command": sys.executable, "args": [str(NOISY), "--flood", str(pidfile)]}
    task = McpTask({"noisy": server}, ToolCallSpec("evaluate"))
    caplog.set_level(logging.DEBUG)
    start = time.monotonic()
    with pytest.raises(McpFailure) as info:
        async with open_environment(task, McpEndpoint("", "", 20.0)) as environment:
            await environment.start()
    assert time.monotonic() - start < 10  # its budget stopped it, not the 20 s timeout
    reason = "MCP server wrote \\d+ bytes of non-protocol output to stdout"
    assert re.match(f"MCP server 'noisy' did not start: {reason}", str(info.value))
    assert "warming up the cache" in str(info.value)  # its first such line
    assert not any(record.exc_info for record in caplog.records)  # no traceback a line
    assert sum(len(record.getMessage()) for record in caplog.records) < 10_000
    assert _gone(int(pidfile.read_text()))


async def test_a_server_under_the_budget_serves_and_its_output_is_counted_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = {"command": sys.executable, "args": [str(NOISY), "--banner", "4000"]}
    task = McpTask({"noisy": server}, ToolCallSpec("evaluate"), ToolCallSpec("setup"))
    async with open_environment(task, McpEndpoint("", "", 20.0)) as environment:
        assert await environment.start() == "ready"
        assert (await environment.evaluate()).reward == 1.0
    counted = [r.getMessage() for r in caplog.records if "non-protocol" in r.getMessage()]
    assert len(counted) == 1 and "MCP server wrote 4000 bytes" in counted[0], counted
