"""`artfleet rollout run` and `artfleet eval run` as a fleet's user runs them: the policy
endpoint from the fleet's environment (`ARTFLEET_POLICY_BASE_URL`, which fleet.env
exports), and an environment without `--reward` scored as a job of it would be (an MCP
environment by its evaluate tool). Against a stand-in Rollout service that records the
tasks it is given: no model, no sandbox."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from typer.testing import CliRunner

from artfleet.specs.job import default_scorers
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc
from artfleet_cli.main import app

FLEET_POLICY = "http://127.0.0.1:8123/v1"  # as fleet.env exports it


@dataclass
class StandIn(rollout_pb2_grpc.RolloutServicer):
    """Environments by agent kind: `mcp-env` (agent `mcp`), any other name a terminal one."""

    tasks: list[rollout_pb2.GroupTask] = field(default_factory=list)

    def DescribeEnvironment(self, request: Any, context: Any) -> rollout_pb2.EnvironmentInfo:
        agent = "mcp" if request.name == "mcp-env" else "terminal"
        scenarios = [rollout_pb2.ScenarioInfo(id=f"t{i}", split="test") for i in range(2)]
        scenarios.append(rollout_pb2.ScenarioInfo(id="a", split="train"))
        return rollout_pb2.EnvironmentInfo(name=request.name, agent=agent, scenarios=scenarios)

    def CheckPolicy(self, request: Any, context: Any) -> rollout_pb2.CheckPolicyResponse:
        return rollout_pb2.CheckPolicyResponse(reachable=True, authorized=True, served=True)

    def RunGroup(self, request: Any, context: Any) -> rollout_pb2.RunGroupResponse:
        self.tasks.append(request.task)
        group = pb.TrajectoryGroup(trajectories=[pb.Trajectory(reward=1.0)])
        return rollout_pb2.RunGroupResponse(group=group)


@pytest.fixture
def rollout() -> Iterator[tuple[StandIn, str]]:
    servicer = StandIn()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rollout_pb2_grpc.add_RolloutServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def _invoke(args: list[str], target: str, policy_url: str | None) -> Any:
    env = {
        "ARTFLEET_ROLLOUT_TARGET": target,
        "ARTFLEET_API_TOKEN": "cli-test-token-0123456789",
        "ARTFLEET_POLICY_BASE_URL": policy_url,
    }
    return CliRunner().invoke(app, args, env=env)


ROLLOUT = ["rollout", "run", "--model", "base", "--json"]
EVAL = ["eval", "run", "--model", "base", "--k", "1"]


@pytest.mark.parametrize("command", [ROLLOUT, EVAL], ids=["rollout", "eval"])
def test_the_policy_endpoint_comes_from_the_fleets_environment(
    rollout: tuple[StandIn, str], command: list[str]
) -> None:
    servicer, target = rollout
    result = _invoke([*command, "--env", "shell-tasks"], target, FLEET_POLICY)
    assert result.exit_code == 0, result.output
    assert {t.model_base_url for t in servicer.tasks} == {FLEET_POLICY}
    # --base-url still wins over the environment.
    other = "http://127.0.0.1:9/v1"
    result = _invoke([*command, "--env", "shell-tasks", "--base-url", other], target, FLEET_POLICY)
    assert result.exit_code == 0, result.output
    assert servicer.tasks[-1].model_base_url == other


@pytest.mark.parametrize("command", [ROLLOUT, EVAL], ids=["rollout", "eval"])
def test_without_a_policy_endpoint_the_usage_error_says_where_it_comes_from(
    rollout: tuple[StandIn, str], command: list[str]
) -> None:
    servicer, target = rollout
    result = _invoke(command, target, None)
    assert result.exit_code == 2
    assert "pass --base-url or set ARTFLEET_POLICY_BASE_URL" in result.stderr
    assert servicer.tasks == []


@pytest.mark.parametrize("command", [ROLLOUT, EVAL], ids=["rollout", "eval"])
def test_an_mcp_environment_is_scored_by_its_evaluate_tool_as_a_job_would_be(
    rollout: tuple[StandIn, str], command: list[str]
) -> None:
    servicer, target = rollout
    scored = {}
    for env in ("mcp-env", "shell-tasks"):
        servicer.tasks.clear()
        result = _invoke([*command, "--env", env], target, FLEET_POLICY)
        assert result.exit_code == 0, result.output
        scored[env] = {tuple(s.name for s in t.reward.scorers) for t in servicer.tasks}
    job_default = tuple(s.name for s in default_scorers("terminal"))
    assert scored == {"mcp-env": {("mcp_evaluate",)}, "shell-tasks": {job_default}}
    assert job_default != ("mcp_evaluate",)
    # A --reward given is kept whatever the environment.
    given = [*command, "--env", "mcp-env", "--reward", "[{name: process}]"]
    result = _invoke(given, target, FLEET_POLICY)
    assert result.exit_code == 0, result.output
    assert [s.name for s in servicer.tasks[-1].reward.scorers] == ["process"]
