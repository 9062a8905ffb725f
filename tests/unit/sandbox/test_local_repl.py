"""The local backend's REPL with real shells: state persists, faults leave it usable."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from prometheus_client import REGISTRY

from artfleet_sandbox.backend import ExecOutcome, ExecSpec, SessionSpec
from artfleet_sandbox.local_backend import LocalBackend

pytestmark = pytest.mark.timeout(120)

_RESTARTS = "artfleet_sandbox_repl_restarts_total"


async def run(
    backend: LocalBackend, sid: str, command: str, timeout_s: float = 30, **kw: object
) -> ExecOutcome:
    spec = ExecSpec(command=command, timeout_s=timeout_s, max_output_bytes=1 << 20, **kw)  # type: ignore[arg-type]
    return await backend.exec(sid, spec)


async def session(backend: LocalBackend) -> str:
    return (await backend.create_session(SessionSpec())).session_id


async def test_cd_export_function_and_background_job_persist(backend: LocalBackend) -> None:
    sid = await session(backend)
    first = await run(backend, sid, "mkdir sub && cd sub && export FOO=bar; f() { echo f$1; }")
    assert first.exit_code == 0 and not first.shell_restarted and not first.stateless
    await run(backend, sid, "sleep 300 & echo $! > ../job.pid")
    out = await run(backend, sid, 'basename "$PWD"; echo $FOO; f 7; jobs -r | wc -l')
    assert out.stdout == b"sub\nbar\nf7\n1\n" and out.exit_code == 0
    assert not out.shell_restarted


async def test_streams_and_status_are_exact(backend: LocalBackend) -> None:
    sid = await session(backend)
    binary = await run(backend, sid, "printf '\\000\\377\\n\\001'; printf 'e\\000' >&2; (exit 3)")
    assert binary.stdout == b"\x00\xff\n\x01" and binary.stderr == b"e\x00"
    assert binary.exit_code == 3
    empty = await run(backend, sid, "true")
    assert empty.stdout == b"" and empty.stderr == b"" and empty.exit_code == 0
    bare = await run(backend, sid, "printf no-newline; printf err >&2")
    assert bare.stdout == b"no-newline" and bare.stderr == b"err"


async def test_stdin_is_eof_or_the_bytes_sent(backend: LocalBackend) -> None:
    sid = await session(backend)
    out = await run(backend, sid, "cat; read x; echo rc=$?")
    assert out.stdout == b"rc=1\n"
    fed = await run(backend, sid, "cat", stdin=b"in\x00put")
    assert fed.stdout == b"in\x00put"


async def test_per_call_cwd_and_env_and_stateless_mode(backend: LocalBackend) -> None:
    sid = await session(backend)
    await run(backend, sid, "mkdir -p a/b")
    out = await run(backend, sid, 'echo "$V ${PWD##*/}"', cwd="a/b", env={"V": "x y"})
    assert out.stdout == b"x y b\n"
    await run(backend, sid, "export KEPT=1")
    stateless = await run(backend, sid, 'echo "[$KEPT]"', mode="stateless")
    assert stateless.stdout == b"[]\n" and stateless.stateless


async def test_timeout_kills_the_command_and_restarts_the_shell(backend: LocalBackend) -> None:
    sid = await session(backend)
    await run(backend, sid, "export GONE=1; echo keep > kept.txt")
    started = time.monotonic()
    out = await run(backend, sid, "(setsid sleep 1000 &); sleep 1000", timeout_s=1)
    assert out.timed_out and out.exit_code == -1 and out.shell_restarted
    assert time.monotonic() - started < 60
    after = await run(backend, sid, 'echo "[$GONE]"; cat kept.txt')
    assert after.stdout == b"[]\nkeep\n" and not after.shell_restarted


@pytest.mark.parametrize(
    ("command", "status"), [("exit 3", 3), ("kill -9 $$", 137), ("exec true", 0)]
)
async def test_a_shell_that_ends_is_restarted_with_a_flag(
    backend: LocalBackend, command: str, status: int
) -> None:
    sid = await session(backend)
    await run(backend, sid, "export GONE=1")
    restarts = REGISTRY.get_sample_value(_RESTARTS, {"backend": "local"}) or 0
    out = await run(backend, sid, command)
    assert out.shell_restarted and out.exit_code == status and not out.timed_out
    after = await run(backend, sid, 'echo "[$GONE]"')
    assert after.stdout == b"[]\n" and not after.shell_restarted
    now = REGISTRY.get_sample_value(_RESTARTS, {"backend": "local"})
    assert now == restarts + 1


async def test_a_shell_killed_between_calls_is_flagged_on_the_next(backend: LocalBackend) -> None:
    sid = await session(backend)
    await run(backend, sid, "(sleep 0.2; kill -9 $$) >/dev/null 2>&1 &")
    deadline = time.monotonic() + 60
    while True:  # until the shell is seen gone (the kill lands whenever the machine allows)
        out = await run(backend, sid, "true")
        if out.shell_restarted:
            break
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert (await run(backend, sid, "echo ok")).stdout == b"ok\n"


async def test_output_past_the_cap_is_truncated(backend: LocalBackend) -> None:
    sid = await session(backend)
    spec = ExecSpec("head -c 100000 /dev/zero; echo done", timeout_s=30, max_output_bytes=100)
    out = await backend.exec(sid, spec)
    assert len(out.stdout) == 100 and out.stdout_truncated and out.exit_code == 0
    assert not out.shell_restarted


async def test_close_ends_the_shell_and_its_jobs(backend: LocalBackend) -> None:
    sid = await session(backend)
    pid = int((await run(backend, sid, "sleep 1000 & echo $$")).stdout)
    assert await backend.close_session(sid)
    assert pid > 0


async def test_the_shell_starts_when_the_session_opens(backend: LocalBackend) -> None:
    # A first command then finds bash (under bubblewrap: most of its time) already running.
    sid = await session(backend)
    held = backend._sessions.get(sid)
    deadline = time.monotonic() + 60
    while held.repl is None or not held.repl.running:
        assert time.monotonic() < deadline, "no shell started without a command"
        await asyncio.sleep(0.01)
    pid = held.repl_pid
    first = await run(backend, sid, "echo $$")
    assert first.exit_code == 0 and not first.shell_restarted
    assert held.repl.commands == 1 and held.repl_pid == pid  # that shell ran it


async def test_a_stateless_session_starts_no_shell(backend: LocalBackend) -> None:
    sid = (await backend.create_session(SessionSpec(repl=False))).session_id
    assert backend._sessions.get(sid).warming is None
    out = await run(backend, sid, "echo ok")
    assert out.stateless and out.stdout == b"ok\n"


async def test_a_session_closed_while_its_shell_starts_leaves_no_shell(
    backend: LocalBackend,
) -> None:
    sid = await session(backend)
    held = backend._sessions.get(sid)
    assert held.warming is not None and not held.warming.done()  # closed before it ran
    assert await backend.close_session(sid)
    assert held.repl is not None and not held.repl.running
    assert held.repl_pid > 0
    with pytest.raises(ProcessLookupError):  # killed, and reaped by the loop
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            os.kill(held.repl_pid, 0)
            await asyncio.sleep(0.01)
