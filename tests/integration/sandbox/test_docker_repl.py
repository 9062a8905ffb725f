"""The session REPL in real containers, through gRPC: state persists, faults are flagged."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sandbox_docker_kit import TOKEN, AppFactory

from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import sandbox_pb2 as pb
from artfleet.v1 import sandbox_pb2_grpc
from artfleet_sandbox.docker_backend import DockerBackend

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MiB = 1024 * 1024


class Repl:
    def __init__(self, stub: sandbox_pb2_grpc.SandboxStub) -> None:
        self.stub = stub

    async def session(self, **fields: Any) -> str:
        return str((await self.stub.CreateSession(pb.CreateSessionRequest(**fields))).session_id)

    async def run(self, sid: str, command: str, timeout_s: float = 20, **kw: Any) -> Any:
        request = pb.ExecRequest(session_id=sid, command=command, timeout_s=timeout_s, **kw)
        return await self.stub.Exec(request, timeout=timeout_s + 60)


@pytest.fixture
async def repl(sandbox_app: AppFactory) -> AsyncIterator[Repl]:
    async with (
        sandbox_app(pool_size=0, max_timeout_s=60) as app,
        aio_channel(f"127.0.0.1:{app.server.port}", TOKEN) as channel,
    ):
        yield Repl(sandbox_pb2_grpc.SandboxStub(channel))


async def test_cd_export_function_and_background_job_persist(repl: Repl) -> None:
    sid = await repl.session()
    first = await repl.run(sid, "mkdir sub && cd sub && export FOO=bar; f() { echo f$1; }")
    assert first.exit_code == 0 and not first.shell_restarted
    await repl.run(sid, "sleep 300 &")
    out = await repl.run(sid, 'echo "$PWD"; echo $FOO; f 7; jobs -r | wc -l')
    assert out.stdout == b"/workspace/sub\nbar\nf7\n1\n" and not out.shell_restarted


async def test_streams_and_status_are_exact(repl: Repl) -> None:
    sid = await repl.session()
    out = await repl.run(sid, "printf '\\000\\377\\n\\001'; printf 'e\\000' >&2; (exit 3)")
    assert (out.stdout, out.stderr, out.exit_code) == (b"\x00\xff\n\x01", b"e\x00", 3)
    empty = await repl.run(sid, "true")
    assert (empty.stdout, empty.stderr, empty.exit_code) == (b"", b"", 0)
    bare = await repl.run(sid, "printf no-newline; printf err >&2")
    assert (bare.stdout, bare.stderr) == (b"no-newline", b"err")
    fed = await repl.run(sid, "cat; read x; echo rc=$?")
    assert fed.stdout == b"rc=1\n"  # stdin is EOF, not the protocol stream
    fed = await repl.run(sid, "cat", stdin=b"in\x00put")
    assert fed.stdout == b"in\x00put"


async def test_stateless_mode_per_request_and_per_session(repl: Repl) -> None:
    sid = await repl.session()
    await repl.run(sid, "export KEPT=1")
    out = await repl.run(sid, 'echo "[$KEPT]"', mode=pb.EXEC_MODE_STATELESS)
    assert out.stdout == b"[]\n"
    plain = await repl.session(exec_mode=pb.EXEC_MODE_STATELESS)
    await repl.run(plain, "export KEPT=1")
    assert (await repl.run(plain, 'echo "[$KEPT]"')).stdout == b"[]\n"
    assert (await repl.run(plain, 'echo "[$KEPT]"', mode=pb.EXEC_MODE_REPL)).stdout == b"[]\n"


async def test_timeout_restarts_the_shell_and_keeps_the_files(repl: Repl) -> None:
    sid = await repl.session()
    await repl.run(sid, "export GONE=1; echo keep > kept.txt")
    out = await repl.run(sid, "(setsid sleep 1000 &); sleep 1000", timeout_s=2)
    assert out.timed_out and out.exit_code == -1 and out.shell_restarted
    after = await repl.run(sid, 'echo "[$GONE]"; cat kept.txt')
    assert after.stdout == b"[]\nkeep\n" and not after.shell_restarted


@pytest.mark.parametrize(("command", "status"), [("exit 3", 3), ("kill -9 $$", 137)])
async def test_a_shell_that_ends_is_restarted_with_a_flag(
    repl: Repl, command: str, status: int
) -> None:
    sid = await repl.session()
    await repl.run(sid, "export GONE=1")
    out = await repl.run(sid, command)
    assert out.shell_restarted and out.exit_code == status and not out.timed_out
    after = await repl.run(sid, 'echo "[$GONE]"')
    assert after.stdout == b"[]\n" and not after.shell_restarted


async def test_oom_of_a_command_keeps_the_shell(repl: Repl) -> None:
    sid = await repl.session(resources=pb.Resources(memory_bytes=256 * MiB))
    await repl.run(sid, "export KEPT=1")
    out = await repl.run(sid, "python3 -c 'x = bytearray(1024 ** 3)'")
    assert out.exit_code == 137 and out.oom_killed and not out.shell_restarted
    assert (await repl.run(sid, 'echo "[$KEPT]"')).stdout == b"[1]\n"


async def test_oom_of_the_shell_itself_is_flagged(repl: Repl) -> None:
    sid = await repl.session(resources=pb.Resources(memory_bytes=128 * MiB))
    # The shell itself grows until the OOM killer ends it (no child to blame).
    out = await repl.run(sid, "x=y; while :; do x=$x$x; done", timeout_s=60)
    assert out.shell_restarted and not out.timed_out
    assert (await repl.run(sid, "echo ok")).stdout == b"ok\n"


async def test_a_shell_killed_between_calls_is_flagged_on_the_next(repl: Repl) -> None:
    sid = await repl.session()
    await repl.run(sid, "(sleep 0.2; kill -9 $$) >/dev/null 2>&1 &")
    deadline = time.monotonic() + 60
    while not (await repl.run(sid, "true")).shell_restarted:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert (await repl.run(sid, "echo ok")).stdout == b"ok\n"


async def test_the_shell_starts_when_the_session_opens(sandbox_app: AppFactory) -> None:
    # The first command finds the shell (a `docker exec`) already running: its result
    # comes from that shell, not one it had to start.
    async with (
        sandbox_app(pool_size=0, max_timeout_s=60) as app,
        aio_channel(f"127.0.0.1:{app.server.port}", TOKEN) as channel,
    ):
        repl = Repl(sandbox_pb2_grpc.SandboxStub(channel))
        sid = await repl.session()
        backend = app.backend
        assert isinstance(backend, DockerBackend)
        held = backend._sessions.get(sid)
        deadline = time.monotonic() + 60
        while held.repl is None or not held.repl.running:
            assert time.monotonic() < deadline, "no shell started without a command"
            await asyncio.sleep(0.01)
        first = await repl.run(sid, "echo $$")
        assert first.exit_code == 0 and not first.shell_restarted
        assert held.repl.commands == 1
