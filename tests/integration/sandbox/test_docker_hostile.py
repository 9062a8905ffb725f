"""Hostile code in real containers: each case is contained and the service stays healthy.

Every case runs twice: in the session's REPL (the default) and stateless.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sandbox_docker_kit import TOKEN, AppFactory, our_containers
from waiting import wait_for_async

from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import sandbox_pb2 as pb
from artfleet.v1 import sandbox_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MiB = 1024 * 1024


REPL_SHELL = "--noprofile --norc"  # in the args of the session's REPL shell (see repl.py)


class Client:
    def __init__(self, channel: grpc.aio.Channel, mode: pb.ExecMode = pb.EXEC_MODE_REPL) -> None:
        self.stub = sandbox_pb2_grpc.SandboxStub(channel)
        self.health = health_pb2_grpc.HealthStub(channel)
        self.mode = mode

    async def session(self, **fields: Any) -> str:
        return str((await self.stub.CreateSession(pb.CreateSessionRequest(**fields))).session_id)

    async def run(self, sid: str, command: str, timeout_s: float = 10, **kw: Any) -> Any:
        return await self.stub.Exec(
            pb.ExecRequest(
                session_id=sid, command=command, timeout_s=timeout_s, mode=self.mode, **kw
            ),
            timeout=timeout_s + 60,
        )

    async def assert_healthy(self, sid: str) -> None:
        """The service answers health, the session still runs commands, and a new one works."""
        status = await self.health.Check(health_pb2.HealthCheckRequest(service=""))
        assert status.status == health_pb2.HealthCheckResponse.SERVING
        assert (await self.run(sid, "echo alive")).stdout == b"alive\n"
        fresh = await self.session()
        assert (await self.run(fresh, "echo fresh")).stdout == b"fresh\n"
        await self.stub.CloseSession(pb.CloseSessionRequest(session_id=fresh))

    async def user_processes(self, sid: str) -> list[str]:
        """Processes of the session's user other than the `ps` pipeline and the REPL shell."""
        out = await self.run(
            sid, f"ps -ww -u 1000 -o pid=,args= | grep -v -e 'ps -ww' -e grep -e '{REPL_SHELL}'"
        )
        return [line for line in out.stdout.decode().splitlines() if line.strip()]

    async def assert_no_user_processes_left(self, sid: str) -> None:
        """Every killed process is gone. A SIGKILLed one lingers as `[bash]` until the
        kernel has torn it down and the container's init reaped it, later on a loaded
        machine: wait for that, with a deadline that only a survivor reaches."""
        deadline = time.monotonic() + 30
        while left := await self.user_processes(sid):
            assert time.monotonic() < deadline, f"survivors: {left}"
            await asyncio.sleep(0.2)


@pytest.fixture(
    params=[
        pytest.param(pb.EXEC_MODE_REPL, id="repl"),
        pytest.param(pb.EXEC_MODE_STATELESS, id="stateless"),
    ]
)
async def client(sandbox_app: AppFactory, request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    async with (
        sandbox_app(pool_size=0, max_timeout_s=60, max_output_bytes=64 * 1024) as app,
        aio_channel(f"127.0.0.1:{app.server.port}", TOKEN) as channel,
    ):
        yield Client(channel, request.param)


async def test_fork_bomb_is_capped_by_pids_and_killed_by_the_timeout(client: Client) -> None:
    sid = await client.session(resources=pb.Resources(pids=64))
    out = await client.run(sid, "bomb() { bomb | bomb & }; bomb; sleep 30", timeout_s=5)
    assert out.timed_out and out.exit_code == -1
    await client.assert_no_user_processes_left(sid)
    await client.assert_healthy(sid)


async def test_memory_hog_is_oom_killed_and_reported(client: Client) -> None:
    sid = await client.session(resources=pb.Resources(memory_bytes=256 * MiB))
    out = await client.run(sid, "python3 -c 'x = bytearray(1024 ** 3); print(len(x))'")
    assert out.exit_code == 137 and out.oom_killed and not out.stdout
    await client.assert_healthy(sid)


async def test_cpu_spin_past_the_timeout_is_killed_not_the_session(client: Client) -> None:
    sid = await client.session()
    await client.run(sid, "echo keep > kept.txt")
    out = await client.run(sid, "while :; do :; done", timeout_s=2)
    assert out.timed_out and out.exit_code == -1 and 2 <= out.duration_s < 10
    assert (await client.run(sid, "cat kept.txt")).stdout == b"keep\n"
    await client.assert_no_user_processes_left(sid)
    await client.assert_healthy(sid)


async def test_sigterm_ignorers_and_setsid_escapees_are_killed(client: Client) -> None:
    sid = await client.session()
    command = "trap '' TERM; (setsid sleep 1000 &); (trap '' TERM; sleep 1000) & sleep 1000"
    out = await client.run(sid, command, timeout_s=2)
    assert out.timed_out
    await client.assert_no_user_processes_left(sid)
    await client.assert_healthy(sid)


async def test_no_network_egress_by_default(client: Client) -> None:
    sid = await client.session()
    probe = (
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\" "
        "2>&1; echo rc=$?; tail -n +3 /proc/net/dev | cut -d: -f1"
    )
    out = await client.run(sid, probe)
    text = out.stdout.decode()
    assert "rc=1" in text and "Network is unreachable" in text
    assert text.split("rc=1")[1].split() == ["lo"]  # only loopback exists
    await client.assert_healthy(sid)


async def test_writes_outside_the_workspace_fail_and_tmp_is_capped(client: Client) -> None:
    sid = await client.session(resources=pb.Resources(tmp_bytes=16 * MiB))
    for target in ("/etc/evil", "/usr/bin/evil", "/root/evil", "/evil"):
        out = await client.run(sid, f"echo x > {target}")
        assert out.exit_code != 0, target
        assert b"Read-only file system" in out.stderr or b"Permission denied" in out.stderr
    out = await client.run(sid, "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; echo rc=$?")
    assert b"No space left on device" in out.stdout and b"rc=1" in out.stdout
    assert (await client.run(sid, "echo ok > /workspace/fine && cat fine")).stdout == b"ok\n"
    await client.assert_healthy(sid)


async def test_host_files_and_server_secrets_are_out_of_reach(client: Client) -> None:
    marker = f"/tmp/artfleet-host-secret-{secrets.token_hex(6)}"
    await asyncio.to_thread(Path(marker).write_text, "host secret")
    try:
        sid = await client.session()
        out = await client.run(sid, f"cat {marker}; cat /etc/shadow; env")
        assert b"host secret" not in out.stdout
        assert b"No such file" in out.stderr and b"Permission denied" in out.stderr
        assert TOKEN.encode() not in out.stdout and b"ARTFLEET_" not in out.stdout
    finally:
        await asyncio.to_thread(os.unlink, marker)
    await client.assert_healthy(sid)


async def test_the_docker_socket_is_not_reachable(client: Client) -> None:
    sid = await client.session()
    probe = (
        "ls -l /var/run/docker.sock /run/docker.sock 2>&1; "
        'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
        "s.connect('/var/run/docker.sock')\" 2>&1; echo rc=$?"
    )
    out = await client.run(sid, probe)
    assert b"No such file" in out.stdout and out.stdout.endswith(b"rc=1\n")
    out = await client.run(sid, "grep -c docker.sock /proc/mounts || true")
    assert out.stdout == b"0\n"
    await client.assert_healthy(sid)


async def test_gigabytes_of_output_are_capped_and_cut_short(client: Client) -> None:
    sid = await client.session()
    out = await client.run(sid, "head -c 3G /dev/zero; echo done >&2", timeout_s=60)
    assert out.stdout_truncated and len(out.stdout) == 64 * 1024
    assert out.duration_s < 30  # killed at the drain limit, not after 3 GB
    out = await client.run(sid, "yes", max_output_bytes=100, timeout_s=60)
    assert out.stdout == b"y\n" * 50 and out.stdout_truncated
    await client.assert_healthy(sid)


async def test_a_session_left_open_past_its_ttl_is_reaped(
    sandbox_app: AppFactory, docker_client: Any, deployment: str
) -> None:
    async with (
        sandbox_app(pool_size=0, reap_interval_s=0.5) as app,
        aio_channel(f"127.0.0.1:{app.server.port}", TOKEN) as channel,
    ):
        client = Client(channel)
        sid = await client.session(idle_ttl_s=1)
        kept = await client.session()  # default TTL: stays

        def sessions() -> set[str]:
            return {
                c.labels["io.artfleet.session"] for c in our_containers(docker_client, deployment)
            }

        await wait_for_async("the idle session's container reaped", lambda: sid not in sessions())
        assert kept in sessions()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await client.run(sid, "true")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        await client.assert_healthy(kept)
