"""The trainer reaches every rollout replica (artfleet_trainer.clients.rollouts): a call
goes to one that connects, and on to the next when one refuses or hangs (a worker cut off
from the network), so a policy check never waits on one worker. Real in-process gRPC."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from artfleet.contracts.errors import Unavailable
from artfleet.runtime.service import free_port
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc
from artfleet_trainer.clients.rollouts import RolloutClient


class Rollout(rollout_pb2_grpc.RolloutServicer):
    def __init__(self) -> None:
        self.checks = 0

    async def CheckPolicy(
        self, request: rollout_pb2.CheckPolicyRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.CheckPolicyResponse:
        self.checks += 1
        return rollout_pb2.CheckPolicyResponse(served=True, served_as=request.policy)


@pytest.fixture
async def live() -> AsyncIterator[tuple[str, Rollout]]:
    servicer = Rollout()
    server = grpc.aio.server()
    rollout_pb2_grpc.add_RolloutServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}", servicer
    await server.stop(None)


async def test_a_refusing_replica_is_passed_over_and_then_avoided(
    live: tuple[str, Rollout],
) -> None:
    address, servicer = live
    client = RolloutClient(f"127.0.0.1:{free_port()},{address}", "token")
    for _ in range(4):
        assert await client.check_policy("http://inference:8000/v1", "agent@1") is None
    assert servicer.checks == 4


async def test_a_replica_that_hangs_costs_the_connect_bound_once(
    live: tuple[str, Rollout],
) -> None:
    address, servicer = live
    with socket.socket() as hung:  # accepts TCP, never speaks HTTP/2: a host cut off
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        target = f"127.0.0.1:{hung.getsockname()[1]},{address}"
        client = RolloutClient(target, "token", connect_s=0.5)
        start = time.monotonic()
        for _ in range(3):
            assert await client.check_policy("http://inference:8000/v1", "agent@1") is None
        assert time.monotonic() - start < 0.5 * 2 + 5  # at most one wait on the hung one
        assert client._choice.avoided(target.split(",")[0])  # tried, and passed over since
    assert servicer.checks == 3


async def test_no_replica_answering_is_unavailable_naming_the_target() -> None:
    target = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    with pytest.raises(Unavailable, match=re.escape(f"rollout service {target}")) as info:
        await RolloutClient(target, "token").check_policy("http://i:8000/v1", "agent@1")
    assert "refused the connection" in str(info.value)
