"""RewardServicer without a network: rewards set on the group, errors and metrics."""

from __future__ import annotations

import json
import socket
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from artfleet.rewards import fail_job_reason
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2
from artfleet_reward.metrics import RewardMetrics
from artfleet_reward.servicer import RewardServicer, build_servicer
from artfleet_reward.settings import RewardSettings


class _Aborted(Exception):
    pass


class FakeContext:
    """Records abort() like grpc.aio does (abort raises)."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise _Aborted(details)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def servicer(registry: CollectorRegistry) -> RewardServicer:
    return RewardServicer(RewardMetrics(registry))


def _request(n: int = 2, spec: pb.RewardSpec | None = None) -> reward_pb2.ScoreGroupRequest:
    group = pb.TrajectoryGroup(
        trajectories=[pb.Trajectory(logs=[f"t{i}"]) for i in range(n)],
        logs=["group log"],
    )
    episodes = [
        pb.Episode(
            steps=[pb.StepEvent(valid_format=True, executed=True, exit_code=0)],
            check_ran=True,
            check_passed=i % 2 == 0,
        )
        for i in range(n)
    ]
    request = reward_pb2.ScoreGroupRequest(group=group, episodes=episodes)
    if spec is not None:
        request.spec.CopyFrom(spec)
    return request


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_scores_and_sets_rewards(servicer: RewardServicer, registry: Any) -> None:
    response = await servicer.ScoreGroup(_request(), FakeContext())
    rewards = [t.reward for t in response.group.trajectories]
    assert rewards == [pytest.approx(1.03, abs=1e-12), pytest.approx(0.03, abs=1e-12)]
    assert [s.reward for s in response.scores] == rewards
    assert dict(response.scores[0].components) == {
        "process": pytest.approx(0.03, abs=1e-12),
        "task_check": 1.0,
    }
    # The rest of the group travels back untouched; components become trajectory metrics.
    assert [t.logs[0] for t in response.group.trajectories] == ["t0", "t1"]
    assert list(response.group.logs) == ["group log"]
    assert response.group.trajectories[1].metrics["reward_task_check"].float_value == 0.0
    assert _value(registry, "artfleet_reward_requests_total") == 1
    assert _value(registry, "artfleet_reward_score_count", scorer="total") == 2
    assert _value(registry, "artfleet_reward_score_count", scorer="process") == 2
    assert _value(registry, "artfleet_reward_scoring_seconds_count") == 1


async def test_empty_group(servicer: RewardServicer) -> None:
    response = await servicer.ScoreGroup(_request(0), FakeContext())
    assert len(response.scores) == 0


async def test_unknown_scorer_is_invalid_argument(servicer: RewardServicer, registry: Any) -> None:
    spec = pb.RewardSpec(scorers=[pb.ScorerSpec(name="process"), pb.ScorerSpec(name="rulr")])
    context = FakeContext()
    with pytest.raises(_Aborted):
        await servicer.ScoreGroup(_request(spec=spec), context)
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT
    assert context.details.startswith("reward[1].name: unknown scorer 'rulr'")
    assert (
        _value(registry, "artfleet_reward_failures_total", scorer="request", type="invalid_spec")
        == 1
    )


async def test_length_mismatch_is_invalid_argument(servicer: RewardServicer, registry: Any) -> None:
    request = _request(2)
    del request.episodes[1]
    context = FakeContext()
    with pytest.raises(_Aborted):
        await servicer.ScoreGroup(request, context)
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT
    assert context.details.startswith("episodes: 1 episodes for 2 trajectories")
    assert (
        _value(registry, "artfleet_reward_failures_total", scorer="request", type="invalid_request")
        == 1
    )


def _failing_judge(policy: str) -> pb.RewardSpec:
    # A judge that refuses connections: a real failure, typed "unavailable".
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    judge = {"judge": {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m"}}
    return pb.RewardSpec(
        scorers=[
            pb.ScorerSpec(name="task_check"),
            pb.ScorerSpec(name="judge", params_json=json.dumps(judge), on_error=policy),
        ]
    )


async def test_drop_trajectory_removes_them_from_the_group(
    servicer: RewardServicer, registry: Any
) -> None:
    response = await servicer.ScoreGroup(_request(spec=_failing_judge("drop_trajectory")), None)
    assert len(response.group.trajectories) == 0 and list(response.dropped) == [0, 1]
    assert not response.group_dropped and not response.fail_job
    assert [(f.scorer, f.type, f.trajectory) for f in response.failures] == [
        ("judge", "unavailable", 0),
        ("judge", "unavailable", 1),
    ]
    assert (
        _value(registry, "artfleet_reward_failures_total", scorer="judge", type="unavailable") == 2
    )
    assert (
        _value(registry, "artfleet_reward_dropped_total", scorer="judge", action="drop_trajectory")
        == 2
    )
    assert _value(registry, "artfleet_reward_judge_cache_total", scorer="judge", result="miss") == 2


async def test_zero_keeps_the_group(servicer: RewardServicer) -> None:
    response = await servicer.ScoreGroup(_request(spec=_failing_judge("zero")), None)
    assert [t.reward for t in response.group.trajectories] == [1.0, 0.0]
    assert [s.components["judge"] for s in response.scores] == [0.0, 0.0]
    assert len(response.failures) == 2


@pytest.mark.parametrize(
    ("policy", "kind"), [("drop_group", "RewardGroupDropped"), ("fail_job", "RewardFailJob")]
)
async def test_group_policies_empty_the_group_and_say_why(
    servicer: RewardServicer, registry: Any, policy: str, kind: str
) -> None:
    response = await servicer.ScoreGroup(_request(spec=_failing_judge(policy)), None)
    assert len(response.group.trajectories) == 0 and len(response.scores) == 0
    [exception] = response.group.exceptions
    assert exception.type == kind and "judge" in exception.message
    assert response.group_dropped == (policy == "drop_group")
    assert bool(response.fail_job) == (policy == "fail_job")
    assert fail_job_reason(response.group.exceptions) == (response.fail_job or None)
    assert _value(registry, "artfleet_reward_dropped_total", scorer="judge", action=policy) == 1


def test_build_servicer(registry: CollectorRegistry) -> None:
    settings = RewardSettings(api_token=SecretStr("a-real-test-token"))
    servicer = build_servicer(settings, RewardMetrics(registry))
    assert isinstance(servicer, RewardServicer)
