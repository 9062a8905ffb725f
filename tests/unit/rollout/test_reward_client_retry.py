"""The rollout's reward client rides out a reward replica restart: ScoreGroup is retried on
UNAVAILABLE (scoring is stateless), and each retry is counted. A real gRPC server on a
fixed port stops and comes back, as a killed and restarted reward service does."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from artfleet.runtime.service import free_port
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, reward_pb2_grpc
from artfleet_rollout import metrics
from artfleet_rollout.adapters import GrpcRewardClient

RETRIES = metrics.FAILURES.labels("reward_unavailable")


class Scores(reward_pb2_grpc.RewardServicer):
    async def ScoreGroup(
        self, request: reward_pb2.ScoreGroupRequest, context: grpc.aio.ServicerContext
    ) -> reward_pb2.ScoreGroupResponse:
        return reward_pb2.ScoreGroupResponse(
            scores=[reward_pb2.TrajectoryScore(reward=1.0) for _ in request.group.trajectories]
        )


async def _serve(port: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    reward_pb2_grpc.add_RewardServicer_to_server(Scores(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


async def _until(condition: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_score_is_retried_until_the_reward_service_is_back() -> None:
    port = free_port()
    group = pb.TrajectoryGroup(trajectories=[pb.Trajectory()])
    before = RETRIES._value.get()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        scoring = asyncio.create_task(GrpcRewardClient(channel).score(group, [], pb.RewardSpec()))
        await _until(lambda: RETRIES._value.get() > before)  # it met the dead service
        assert not scoring.done()
        server = await _serve(port)
        try:
            reply = await asyncio.wait_for(scoring, 60)
        finally:
            await server.stop(None)
    assert [s.reward for s in reply.scores] == [1.0]


async def test_an_outage_past_the_retry_bound_fails_the_call() -> None:
    port = free_port()
    group = pb.TrajectoryGroup(trajectories=[pb.Trajectory()])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        client = GrpcRewardClient(channel, retry_s=0.0)  # gives up at once
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await client.score(group, [], pb.RewardSpec())
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
