"""Sticky sessions over two real sandbox replicas, and what a client sees when one dies."""

from __future__ import annotations

from collections import Counter

import grpc
import pytest
from sandbox_docker_kit import TOKEN, AppFactory

from artfleet.clients.sandbox import SandboxRouter, is_replica_lost
from artfleet.v1 import sandbox_pb2 as pb

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


async def test_sessions_spread_stick_and_fail_over(sandbox_app: AppFactory) -> None:
    async with sandbox_app(pool_size=0) as first, sandbox_app(pool_size=0) as second:
        target = f"127.0.0.1:{first.server.port},127.0.0.1:{second.server.port}"
        by_address = {
            f"127.0.0.1:{first.server.port}": first.backend,
            f"127.0.0.1:{second.server.port}": second.backend,
        }
        async with SandboxRouter(target, TOKEN) as router:
            sessions = [await router.create_session(pb.CreateSessionRequest()) for _ in range(6)]
            # Spread: each replica holds half of them.
            assert Counter(s.address for s in sessions) == {a: 3 for a in by_address}
            for session in sessions:
                # Sticky: the replica named in the id is the one at the pinned address.
                backend = by_address[session.address]
                assert session.info.replica == backend.replica_id  # type: ignore[attr-defined]
                out = await session.stub.Exec(
                    pb.ExecRequest(session_id=session.session_id, command="hostname")
                )
                assert out.exit_code == 0

            # A call for one replica's session that reaches the other: UNAVAILABLE, clearly.
            lost_address = f"127.0.0.1:{first.server.port}"
            on_first = next(s for s in sessions if s.address == lost_address)
            on_second = next(s for s in sessions if s.address != lost_address)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await on_second.stub.Exec(
                    pb.ExecRequest(session_id=on_first.session_id, command="true")
                )
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert on_first.info.replica in info.value.details()

            await first.stop()  # the replica goes away with its sessions
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await on_first.stub.Exec(
                    pb.ExecRequest(session_id=on_first.session_id, command="true"), timeout=10
                )
            assert is_replica_lost(info.value)

            # New sessions (an episode started again) land on the live replica.
            retry = await router.create_session(pb.CreateSessionRequest())
            assert retry.address != lost_address
            out = await retry.stub.Exec(pb.ExecRequest(session_id=retry.session_id, command="true"))
            assert out.exit_code == 0
            for session in [s for s in sessions if s.address != lost_address] + [retry]:
                await session.close()
