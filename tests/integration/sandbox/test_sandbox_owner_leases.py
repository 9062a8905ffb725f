"""What a SIGKILL leaves, against real sandbox server processes (local backend): a killed
client's sessions are closed within its owner lease (not the 30-minute idle TTL) while a
live client's stay; a killed replica's workspace directory is removed by the next replica
that starts beside it, and never a live replica's; a rollout worker counts each session
lost with a killed replica once, at its first call, close included (chaos suite findings)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY
from sandbox_replica import TOKEN, Replica, replicas

from artfleet.clients.sandbox import SandboxRouter
from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import sandbox_pb2 as pb
from artfleet.v1 import sandbox_pb2_grpc
from artfleet_rollout.adapters import GrpcWorkspaces
from artfleet_rollout.ports import WorkspaceLost, WorkspaceSpec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
__all__ = ["replicas"]  # the fixture, from sandbox_replica
# Renewed every third of it: a loaded machine would have to stall a renewing client for
# two thirds of a lease (4 s) to lose its sessions.
LEASE_S = 6.0

# A client that holds one session under its owner lease until it is killed.
CLIENT = """
import asyncio, sys
from artfleet.clients.sandbox import SandboxRouter
from artfleet.v1 import sandbox_pb2 as pb

async def main():
    target, token, owner, lease_s = sys.argv[1:5]
    router = SandboxRouter(target, token, owner="client-" + owner, lease_s=float(lease_s))
    for _ in range(2):
        session = await router.create_session(pb.CreateSessionRequest())
        print(session.session_id, flush=True)
    await asyncio.Event().wait()  # renewing, until killed

asyncio.run(main())
"""


async def session_open(stub: sandbox_pb2_grpc.SandboxStub, session_id: str) -> bool:
    try:
        await stub.Exec(pb.ExecRequest(session_id=session_id, command="true"), timeout=30)
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND, exc.details()
        return False
    return True


async def test_a_killed_owners_sessions_close_within_its_lease(
    replicas: list[Replica], tmp_path: Path
) -> None:
    replica = Replica(tmp_path / "ws", tmp_path / "logs").start()
    replicas.append(replica)
    client = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CLIENT,
        replica.target,
        TOKEN,
        "killed",
        str(LEASE_S),
        stdout=subprocess.PIPE,
    )
    assert client.stdout is not None
    lapsing = [(await client.stdout.readline()).decode().strip() for _ in range(2)]
    assert all(lapsing), "the client made no session"
    async with (
        SandboxRouter(replica.target, TOKEN, owner="live", lease_s=LEASE_S) as live,
        aio_channel(replica.target, TOKEN) as channel,
    ):
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        kept = await live.create_session(pb.CreateSessionRequest())
        created = time.monotonic()
        # The killed client had renewed for longer than a lease: renewals work.
        while time.monotonic() - created < 2 * LEASE_S:
            assert all([await session_open(stub, sid) for sid in lapsing])
            await asyncio.sleep(0.2)

        client.send_signal(signal.SIGKILL)
        await client.wait()
        killed_at = time.monotonic()
        # Closed by the lease, not the 30-minute idle TTL (the reason below says which); the
        # deadline is only against a hang, not a timing claim.
        while any([await session_open(stub, sid) for sid in lapsing]):
            assert time.monotonic() - killed_at < 300, "sessions of a dead owner still open"
            await asyncio.sleep(0.2)
        # A session is gone for callers while its close still runs: the count comes after.
        reaped = 'artfleet_sandbox_reaped_sessions_total{reason="lease"}'
        while replica.metric(reaped) < 2:
            assert time.monotonic() - killed_at < 300, f"reaped by lease: {replica.metric(reaped)}"
            await asyncio.sleep(0.2)
        assert replica.metric(reaped) == 2

        # The live owner renews all along: its session outlives several leases.
        while time.monotonic() - created < 4 * LEASE_S:
            assert await session_open(stub, kept.session_id)
            await asyncio.sleep(0.2)
        renewed = await stub.RenewLease(pb.RenewLeaseRequest(owner="live"), timeout=10)
        assert renewed.sessions == 1
        await kept.close()
        gone = await stub.RenewLease(pb.RenewLeaseRequest(owner="live"), timeout=10)
        assert gone.sessions == 0


def test_a_starting_replica_removes_a_killed_replicas_workspace_only(
    replicas: list[Replica], tmp_path: Path
) -> None:
    root, logs = tmp_path / "ws", tmp_path / "logs"
    killed = Replica(root, logs).start()
    live = Replica(root, logs).start()
    replicas += [killed, live]
    killed_dir, live_dir = killed.own_dir(), live.own_dir()
    foreign = root / "artfleet-sandbox-foreign"  # no owner file: not ours to judge
    foreign.mkdir()

    killed.stop(signal.SIGKILL)
    assert killed_dir.exists(), "a SIGKILLed replica cannot clean up after itself"
    restarted = Replica(root, logs).start()  # compose's restart, beside the live one
    replicas.append(restarted)
    assert not killed_dir.exists()
    assert live_dir.exists() and live.serving()
    assert foreign.exists()
    assert restarted.own_dir() != live_dir

    for replica in (live, restarted):  # a graceful stop removes its own dir
        replica.stop()
    assert sorted(p.name for p in root.iterdir()) == [foreign.name]


def rollout_sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_each_session_lost_with_its_replica_counts_once(
    replicas: list[Replica], tmp_path: Path
) -> None:
    root, logs = tmp_path / "ws", tmp_path / "logs"
    replica = Replica(root, logs).start()
    replicas.append(replica)
    lost = ("artfleet_rollout_failures_total", {"kind": "sandbox_lost"})
    held = ("artfleet_rollout_sandbox_sessions", {"replica": replica.target})
    before = rollout_sample(lost[0], **lost[1])
    async with SandboxRouter(replica.target, TOKEN, owner="worker", lease_s=30) as router:
        workspaces = GrpcWorkspaces(router)
        calling, closing = [await workspaces.open(WorkspaceSpec("job", {})) for _ in range(2)]
        assert (await calling.exec("true", timeout_s=10)).exit_code == 0
        assert rollout_sample(held[0], **held[1]) == 2

        replica.stop(signal.SIGKILL)  # and compose restarts it, same address, new replica
        restarted = Replica(root, logs, port=replica.port, metrics_port=replica.metrics_port)
        replicas.append(restarted.start())
        for _ in range(2):  # the session is lost; counted at the first call only
            with pytest.raises(WorkspaceLost, match="lost"):
                await calling.exec("true", timeout_s=10)
        assert rollout_sample(lost[0], **lost[1]) == before + 1
        await calling.close()  # nothing left to close: no error, no second count
        await closing.close()  # its first call after the kill: counted, no error either
        assert rollout_sample(lost[0], **lost[1]) == before + 2
        assert rollout_sample(held[0], **held[1]) == 0
        assert router.in_use() == []


async def test_a_session_closed_behind_its_owners_back_counts_lost_once(
    replicas: list[Replica], tmp_path: Path
) -> None:
    """A worker cut off from a replica for longer than its lease finds its session closed
    (NOT_FOUND) once it is back: the episode starts again (WorkspaceLost), as for a dead
    replica, instead of failing (found by tests/integration/fleet/test_multihost_netns.py)."""
    replica = Replica(tmp_path / "ws", tmp_path / "logs").start()
    replicas.append(replica)
    lost = ("artfleet_rollout_failures_total", {"kind": "sandbox_lost"})
    before = rollout_sample(lost[0], **lost[1])
    async with SandboxRouter(replica.target, TOKEN, owner="worker", lease_s=30) as router:
        workspace = await GrpcWorkspaces(router).open(WorkspaceSpec("job", {}))
        session = workspace._session
        # What the lease's end does on the replica: the session closed, the owner unaware.
        await session.stub.CloseSession(
            pb.CloseSessionRequest(session_id=session.session_id), timeout=30
        )
        for _ in range(2):
            with pytest.raises(WorkspaceLost, match="no open session"):
                await workspace.exec("true", timeout_s=10)
        await workspace.close()
        assert rollout_sample(lost[0], **lost[1]) == before + 1
