"""ScoreGroup through a real gRPC channel to a plain grpc.aio server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import CollectorRegistry

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, reward_pb2_grpc
from artfleet_reward.metrics import RewardMetrics
from artfleet_reward.servicer import RewardServicer

pytestmark = pytest.mark.integration


@pytest.fixture
async def stub() -> AsyncIterator[reward_pb2_grpc.RewardStub]:
    server = grpc.aio.server()
    servicer = RewardServicer(RewardMetrics(CollectorRegistry()))
    reward_pb2_grpc.add_RewardServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield reward_pb2_grpc.RewardStub(channel)
    finally:
        await server.stop(None)


def _request(spec: pb.RewardSpec | None = None) -> reward_pb2.ScoreGroupRequest:
    solved = pb.Episode(
        steps=[
            pb.StepEvent(turn=1, valid_format=True, executed=True, code_modified=True),
            pb.StepEvent(turn=2, valid_format=True, is_submit=True),
        ],
        check_ran=True,
        check_passed=True,
        finish="submit",
        turns=2,
    )
    unsolved = pb.Episode(steps=[pb.StepEvent(turn=1)], check_ran=True, finish="max_turns")
    request = reward_pb2.ScoreGroupRequest(
        group=pb.TrajectoryGroup(trajectories=[pb.Trajectory(), pb.Trajectory()]),
        episodes=[solved, unsolved],
    )
    if spec is not None:
        request.spec.CopyFrom(spec)
    return request


async def test_score_group_sets_rewards(stub: reward_pb2_grpc.RewardStub) -> None:
    response = await stub.ScoreGroup(_request(), timeout=10)
    solved, unsolved = response.scores
    assert solved.reward == pytest.approx(0.01 + 0.02 + 0.03 + 1.0, abs=1e-12)
    assert unsolved.reward == pytest.approx(-0.05, abs=1e-12)
    assert set(solved.components) == {"process", "task_check"}
    assert response.outcome == pb.RewardOutcome()


async def test_weighted_spec(stub: reward_pb2_grpc.RewardStub) -> None:
    spec = pb.RewardSpec(scorers=[pb.ScorerSpec(name="task_check", weight=3.0)])
    response = await stub.ScoreGroup(_request(spec), timeout=10)
    assert [s.reward for s in response.scores] == [3.0, 0.0]


async def test_bad_spec_is_invalid_argument(stub: reward_pb2_grpc.RewardStub) -> None:
    spec = pb.RewardSpec(scorers=[pb.ScorerSpec(name="process"), pb.ScorerSpec(name="jugde")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.ScoreGroup(_request(spec), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith("reward[1].name: unknown scorer 'jugde'")


@pytest.mark.parametrize(
    ("scorer", "field"),
    [
        (
            pb.ScorerSpec(name="ruler", params_json='{"judge": {"base_url": "http://j/v1"}}'),
            "reward[1].params.judge.model",
        ),
        (pb.ScorerSpec(name="tests", on_error="ignore"), "reward[1].on_error"),
        (pb.ScorerSpec(name="tests", gate=pb.Gate(scorer="ruler")), "reward[1].gate.scorer"),
        (pb.ScorerSpec(name="mcp_evaluate", params_json='{"server": {}}'), "reward[1].params"),
    ],
)
async def test_validate_spec_names_the_field_of_new_options(
    stub: reward_pb2_grpc.RewardStub, scorer: pb.ScorerSpec, field: str
) -> None:
    spec = pb.RewardSpec(scorers=[pb.ScorerSpec(name="process"), scorer])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.ValidateSpec(reward_pb2.ValidateSpecRequest(spec=spec), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith(field)


async def test_gates_and_policies_through_grpc(stub: reward_pb2_grpc.RewardStub) -> None:
    # task_check gates process: only the solved episode gets process rewards.
    spec = pb.RewardSpec(
        scorers=[
            pb.ScorerSpec(name="task_check", weight=2.0),
            pb.ScorerSpec(name="process", gate=pb.Gate(scorer="task_check"), on_error="zero"),
        ],
        clip=pb.Range(max=2.05),
    )
    response = await stub.ScoreGroup(_request(spec), timeout=10)
    assert [s.reward for s in response.scores] == [2.05, 0.0]
    assert [s.components["process"] for s in response.scores] == [
        pytest.approx(0.06, abs=1e-12),
        0.0,
    ]


async def test_mismatched_episodes_is_invalid_argument(stub: reward_pb2_grpc.RewardStub) -> None:
    request = _request()
    request.episodes.append(pb.Episode())
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.ScoreGroup(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith("episodes: ")


async def test_validate_spec_resolves_defaults_and_names_bad_fields(
    stub: reward_pb2_grpc.RewardStub,
) -> None:
    reply = await stub.ValidateSpec(reward_pb2.ValidateSpecRequest(), timeout=10)
    assert list(reply.scorers) == ["process", "task_check"]
    spec = pb.RewardSpec(scorers=[pb.ScorerSpec(name="task_check", params_json="[1]")])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.ValidateSpec(reward_pb2.ValidateSpecRequest(spec=spec), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (info.value.details() or "").startswith("reward[0].params")
