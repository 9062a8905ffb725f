"""mcp_evaluate against a real MCP server (the official SDK, over stdio): the counter
environment in tests/fixtures, started once per trajectory through ScoreGroup."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from repo_paths import FIXTURES
from verdicts import with_verdict

from artfleet.contracts import codec
from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2
from artfleet_reward.metrics import RewardMetrics
from artfleet_reward.servicer import RewardServicer

pytestmark = pytest.mark.integration

SERVER = FIXTURES / "mcp_counter_server.py"
LOCAL = {"command": sys.executable, "args": [str(SERVER)]}


def _trajectory(moves: list[str], answer: str = "done") -> pb.Trajectory:
    """An agent that called the environment's `move` tool, then answered."""
    items: list[Any] = [{"role": "user", "content": "Bring the counter to 2."}]
    for n, direction in enumerate(moves):
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "move", "arguments": json.dumps({"direction": direction})},
        }
        items.append({"role": "assistant", "content": None, "tool_calls": [call]})
        items.append({"role": "tool", "tool_call_id": f"call_{n}", "content": "ok"})
    items.append({"role": "assistant", "content": answer})
    return codec.trajectory_to_proto(art.Trajectory(messages_and_choices=items, reward=0.0))


def _request(params: dict[str, Any], *trajectories: pb.Trajectory, policy: str = "drop_group"):
    spec = pb.RewardSpec(
        scorers=[
            pb.ScorerSpec(name="mcp_evaluate", params_json=json.dumps(params), on_error=policy)
        ]
    )
    return reward_pb2.ScoreGroupRequest(
        group=pb.TrajectoryGroup(trajectories=list(trajectories)),
        episodes=[pb.Episode() for _ in trajectories],
        spec=spec,
    )


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def servicer(registry: CollectorRegistry) -> RewardServicer:
    return RewardServicer(RewardMetrics(registry))


async def test_replayed_tool_calls_are_evaluated(servicer: RewardServicer, registry: Any) -> None:
    params = {"server": LOCAL, "setup": {"tool": "setup", "arguments": {"start": 0, "target": 2}}}
    request = _request(
        params,
        _trajectory(["up", "up"]),  # reaches 2: reward 1, done
        _trajectory(["up"]),  # halfway: 0.5
        _trajectory(["up", "sideways", "down"]),  # an invalid move is part of the episode: 0
    )
    response = await servicer.score(request)
    assert [s.reward for s in response.scores] == [1.0, 0.5, 0.0]
    assert not response.outcome.failures
    first = response.scores[0]
    assert first.metrics["mcp_done"] == 1.0
    assert first.metrics["mcp_replayed_calls"] == 2.0
    assert first.components["mcp_evaluate"] == 1.0
    assert any(line.startswith("mcp_evaluate: reward 1") for line in first.logs)
    applied = with_verdict(request.group, response).trajectories[0]
    assert applied.metrics["reward_mcp_evaluate"].float_value == 1.0
    assert applied.metrics["mcp_done"].float_value == 1.0
    assert registry.get_sample_value("artfleet_reward_mcp_seconds_count") == 3


async def test_hud_config_and_the_answer_as_argument(servicer: RewardServicer) -> None:
    params = {
        "mcp_config": {"local": LOCAL},
        "setup": {"arguments": {"target": 7}},
        "replay": False,
        "evaluate": {"tool": "evaluate"},
        "answer_argument": "answer",
    }
    request = _request(params, _trajectory([], answer="7"), _trajectory([], answer="8"))
    response = await servicer.score(request)
    assert [s.reward for s in response.scores] == [1.0, 0.0]


@pytest.mark.parametrize(("tool", "expected"), [("evaluate_text", 0.5), ("evaluate_number", 0.0)])
async def test_text_and_number_results(
    servicer: RewardServicer, tool: str, expected: float
) -> None:
    params = {"server": LOCAL, "setup": {"arguments": {"target": 2}}, "evaluate": tool}
    response = await servicer.score(_request(params, _trajectory(["up"])))
    assert [s.reward for s in response.scores] == [expected]


async def test_failures_follow_the_policy(servicer: RewardServicer, registry: Any) -> None:
    broken = {"server": LOCAL, "evaluate": "broken_evaluate"}
    response = await servicer.score(_request(broken, _trajectory(["up"]), policy="zero"))
    [failure] = response.outcome.failures
    assert (failure.scorer, failure.type) == ("mcp_evaluate", "error")
    assert "environment crashed" in failure.message
    assert [s.reward for s in response.scores] == [0.0]

    missing = {"server": LOCAL, "evaluate": "grade"}
    response = await servicer.score(_request(missing, _trajectory(["up"]), _trajectory([])))
    assert response.outcome.group_dropped and len(response.scores) == 0
    assert "no tool 'grade'" in response.outcome.failures[0].message

    dead = {"server": {"command": sys.executable, "args": [str(SERVER), "--exit"]}}
    request = _request(dead, _trajectory(["up"]), policy="drop_trajectory")
    response = await servicer.score(request)
    assert list(response.outcome.dropped) == [0] and response.scores[0].dropped
    assert response.outcome.failures[0].type == "unavailable"

    slow = {"server": {"command": "sleep", "args": ["30"]}, "timeout_s": 1}
    response = await servicer.score(_request(slow, _trajectory([]), policy="fail_job"))
    assert response.outcome.failures[0].type == "timeout"
    assert response.outcome.fail_job.startswith("reward scorer 'mcp_evaluate' failed (timeout)")
    value = registry.get_sample_value(
        "artfleet_reward_failures_total", {"scorer": "mcp_evaluate", "type": "timeout"}
    )
    assert value == 1


NOISY = FIXTURES / "mcp_noisy_server.py"


async def test_a_server_flooding_stdout_fails_the_score_with_the_reason(
    servicer: RewardServicer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    noisy = {"server": {"command": sys.executable, "args": [str(NOISY), "--flood"]}}
    start = time.monotonic()
    response = await servicer.score(_request(noisy, _trajectory([]), policy="zero"))
    assert time.monotonic() - start < 15  # its budget stopped it, not the 60 s timeout
    [failure] = response.outcome.failures
    assert failure.type == "error"
    assert re.match(r"MCP server wrote \d+ bytes of non-protocol output to stdout", failure.message)
    assert not any(record.exc_info for record in caplog.records)  # no traceback a line
    assert sum(len(record.getMessage()) for record in caplog.records) < 10_000
