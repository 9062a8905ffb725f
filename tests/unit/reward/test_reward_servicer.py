"""RewardServicer without a network: typed scores and outcomes (no copy of the group),
the verdict applied to the caller's group, errors and metrics."""

from __future__ import annotations

import json
import socket
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from verdicts import with_verdict

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


async def test_scores_parallel_to_the_trajectories(servicer: RewardServicer, registry: Any) -> None:
    request = _request()
    response = await servicer.ScoreGroup(request, FakeContext())
    rewards = [s.reward for s in response.scores]
    assert rewards == [pytest.approx(1.03, abs=1e-12), pytest.approx(0.03, abs=1e-12)]
    assert dict(response.scores[0].components) == {
        "process": pytest.approx(0.03, abs=1e-12),
        "task_check": 1.0,
    }
    assert not any(s.dropped for s in response.scores)
    assert not any(s.HasField("independent_reward") for s in response.scores)
    assert response.outcome == pb.RewardOutcome()  # nothing failed, nothing dropped
    # The caller applies the verdict to its own group: the rest of it is untouched, and
    # components become trajectory metrics.
    group = with_verdict(request.group, response)
    assert [t.reward for t in group.trajectories] == rewards
    assert [t.logs[0] for t in group.trajectories] == ["t0", "t1"]
    assert list(group.logs) == ["group log"]
    assert group.trajectories[0].metrics["reward_task_check"].float_value == 1.0
    assert group.trajectories[1].metrics["reward_task_check"].float_value == 0.0
    assert _value(registry, "artfleet_reward_requests_total") == 1
    assert _value(registry, "artfleet_reward_score_count", scorer="total") == 2
    assert _value(registry, "artfleet_reward_score_count", scorer="process") == 2
    assert _value(registry, "artfleet_reward_scoring_seconds_count") == 1


def test_the_response_carries_no_group() -> None:
    fields = reward_pb2.ScoreGroupResponse.DESCRIPTOR.fields_by_name
    assert "group" not in fields and set(fields) == {"scores", "outcome"}
    assert not hasattr(reward_pb2.ScoreGroupResponse(), "group")


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


async def test_drop_trajectory_flags_them_in_scores_and_outcome(
    servicer: RewardServicer, registry: Any
) -> None:
    request = _request(spec=_failing_judge("drop_trajectory"))
    response = await servicer.ScoreGroup(request, None)
    assert [s.dropped for s in response.scores] == [True, True]
    outcome = response.outcome
    assert list(outcome.dropped) == [0, 1]
    assert not outcome.group_dropped and not outcome.fail_job
    assert [(f.scorer, f.type, f.trajectory, f.action) for f in outcome.failures] == [
        ("judge", "unavailable", 0, "drop_trajectory"),
        ("judge", "unavailable", 1, "drop_trajectory"),
    ]
    assert len(with_verdict(request.group, response).trajectories) == 0
    assert (
        _value(registry, "artfleet_reward_failures_total", scorer="judge", type="unavailable") == 2
    )
    assert (
        _value(registry, "artfleet_reward_dropped_total", scorer="judge", action="drop_trajectory")
        == 2
    )
    assert _value(registry, "artfleet_reward_judge_cache_total", scorer="judge", result="miss") == 2


async def test_zero_keeps_the_group(servicer: RewardServicer) -> None:
    request = _request(spec=_failing_judge("zero"))
    response = await servicer.ScoreGroup(request, None)
    assert [s.reward for s in response.scores] == [1.0, 0.0]
    assert [s.components["judge"] for s in response.scores] == [0.0, 0.0]
    assert len(response.outcome.failures) == 2 and not response.outcome.dropped
    assert not response.outcome.group_dropped and not response.outcome.fail_job
    assert [t.reward for t in with_verdict(request.group, response).trajectories] == [1.0, 0.0]


@pytest.mark.parametrize("policy", ["drop_group", "fail_job"])
async def test_group_policies_answer_no_scores_and_say_why(
    servicer: RewardServicer, registry: Any, policy: str
) -> None:
    request = _request(spec=_failing_judge(policy))
    response = await servicer.ScoreGroup(request, None)
    outcome = response.outcome
    assert len(response.scores) == 0
    assert outcome.group_dropped == (policy == "drop_group")
    if policy == "fail_job":
        assert outcome.fail_job.startswith("reward scorer 'judge' failed (unavailable): ")
    else:
        assert outcome.fail_job == ""
    [failure] = outcome.failures  # the first failure stops the group
    assert (failure.scorer, failure.type, failure.trajectory, failure.action) == (
        "judge",
        "unavailable",
        0,
        policy,
    )
    applied = with_verdict(request.group, response)
    assert len(applied.trajectories) == 0 and len(applied.exceptions) == 0
    assert _value(registry, "artfleet_reward_dropped_total", scorer="judge", action=policy) == 1


async def test_drop_trajectory_of_one_keeps_the_others_in_order(servicer: RewardServicer) -> None:
    # The judge only sees trajectory 0 (its check passed), fails, and drops it.
    spec = _failing_judge("drop_trajectory")
    spec.scorers[1].gate.CopyFrom(pb.Gate(scorer="task_check"))
    request = _request(spec=spec)
    response = await servicer.ScoreGroup(request, None)
    assert [s.dropped for s in response.scores] == [True, False]
    assert list(response.outcome.dropped) == [0]
    assert [f.trajectory for f in response.outcome.failures] == [0]
    assert response.scores[1].components["judge"] == 0.0  # gated out, not failed
    [kept] = with_verdict(request.group, response).trajectories
    assert list(kept.logs) == ["t1"] and kept.reward == response.scores[1].reward


async def test_independent_reward_travels_in_the_scores(
    servicer: RewardServicer,
) -> None:
    # RULER replaces the reward (combine: replace); its judge is down and scores 0, so the
    # reward is 0 and the other scorers' weighted sum is the independent reward.
    spec = _failing_judge("zero")
    spec.scorers[0].weight = 2.0
    spec.scorers[1].name = "ruler"
    request = _request(spec=spec)
    response = await servicer.ScoreGroup(request, None)
    assert [s.reward for s in response.scores] == [0.0, 0.0]
    assert [s.independent_reward for s in response.scores] == [2.0, 0.0]
    applied = with_verdict(request.group, response)
    assert [t.metrics["independent_reward"].float_value for t in applied.trajectories] == [
        2.0,
        0.0,
    ]


def test_build_servicer(registry: CollectorRegistry) -> None:
    settings = RewardSettings(api_token=SecretStr("a-real-test-token"))
    servicer = build_servicer(settings, RewardMetrics(registry))
    assert isinstance(servicer, RewardServicer)
