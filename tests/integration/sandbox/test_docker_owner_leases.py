"""Owner leases on the Docker backend: a session whose owner never renews is closed, its
container removed, within the lease; a renewing owner's session stays (the lease table is
the servicer's, so both backends get it; the local one: test_sandbox_owner_leases.py)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from sandbox_docker_kit import TOKEN, AppFactory, our_containers

from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import sandbox_pb2 as pb
from artfleet.v1 import sandbox_pb2_grpc
from artfleet_sandbox.docker_backend.config import LABEL_SESSION

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
LEASE_S = 2.0


async def test_a_lapsed_owners_container_is_removed_within_its_lease(
    sandbox_app: AppFactory, docker_client: Any, deployment: str
) -> None:
    async with (
        sandbox_app(pool_size=0) as app,
        aio_channel(f"127.0.0.1:{app.server.port}", TOKEN) as channel,
    ):
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        lapsing = await stub.CreateSession(
            pb.CreateSessionRequest(owner="gone", owner_lease_s=LEASE_S), timeout=120
        )
        kept = await stub.CreateSession(
            pb.CreateSessionRequest(owner="alive", owner_lease_s=LEASE_S), timeout=120
        )
        created = time.monotonic()

        def sessions() -> set[str]:
            return {c.labels[LABEL_SESSION] for c in our_containers(docker_client, deployment)}

        assert {lapsing.session_id, kept.session_id} <= sessions()
        while lapsing.session_id in sessions():  # "alive" renews, "gone" never does
            renewed = await stub.RenewLease(
                pb.RenewLeaseRequest(owner="alive", lease_s=LEASE_S), timeout=10
            )
            assert renewed.sessions == 1
            assert time.monotonic() - created < 60, "the lapsed owner's container is still there"
            await asyncio.sleep(0.2)
        # The lease, the reaper's one-second check, a container removal: not the idle TTL.
        assert time.monotonic() - created <= LEASE_S + 15
        assert kept.session_id in sessions()
        out = await stub.Exec(pb.ExecRequest(session_id=kept.session_id, command="true"))
        assert out.exit_code == 0
        assert (await stub.CloseSession(pb.CloseSessionRequest(session_id=kept.session_id))).closed
