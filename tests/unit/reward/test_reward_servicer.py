"""RewardServicer without a network: rewards set on the group, errors and metrics."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2
from artfleet_reward import scorers
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
    spec = pb.RewardSpec(scorers=[pb.ScorerSpec(name="process"), pb.ScorerSpec(name="ruler")])
    context = FakeContext()
    with pytest.raises(_Aborted):
        await servicer.ScoreGroup(_request(spec=spec), context)
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT
    assert context.details.startswith("reward[1].name: unknown scorer 'ruler'")
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


async def test_scorer_failure_is_internal(
    servicer: RewardServicer, registry: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(episode: pb.Episode) -> float:
        raise RuntimeError("bug")

    broken_def = scorers.ScorerDef("task_check", "broken", lambda params, field: broken)
    monkeypatch.setitem(scorers.SCORERS, "task_check", broken_def)
    context = FakeContext()
    with pytest.raises(_Aborted):
        await servicer.ScoreGroup(_request(), context)
    assert context.code == grpc.StatusCode.INTERNAL
    assert "task_check" in context.details
    assert (
        _value(registry, "artfleet_reward_failures_total", scorer="task_check", type="scorer_error")
        == 1
    )


def test_build_servicer(registry: CollectorRegistry) -> None:
    settings = RewardSettings(api_token=SecretStr("a-real-test-token"))
    servicer = build_servicer(settings, RewardMetrics(registry))
    assert isinstance(servicer, RewardServicer)
