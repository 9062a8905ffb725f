"""Plain sessions of the local backend come from a warm pool: their shell already runs,
their files are written when they are taken, and nothing of the pool outlives `stop()`."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable

import pytest
from prometheus_client import REGISTRY

from artfleet_sandbox.backend import ExecSpec, FileSpec, SandboxError, SessionSpec
from artfleet_sandbox.local_backend import LocalBackend
from artfleet_sandbox.local_backend.session_dirs import WAITING_MARKER

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def pooled(backend_factory: Callable[..., LocalBackend]) -> AsyncIterator[LocalBackend]:
    instance = backend_factory(session_pool_size=2)
    try:
        await instance.start()
    except SandboxError as exc:  # bwrap installed but user namespaces are not allowed here
        pytest.skip(str(exc))
    yield instance
    await instance.stop()


async def until_ready(backend: LocalBackend, count: int, network: bool = False) -> None:
    deadline = time.monotonic() + 60
    while backend._warm.ready(network) < count:
        assert time.monotonic() < deadline, "the warm pool did not fill"
        await asyncio.sleep(0.01)


async def run(backend: LocalBackend, sid: str, command: str) -> bytes:
    out = await backend.exec(sid, ExecSpec(command=command, timeout_s=30, max_output_bytes=4096))
    assert out.exit_code == 0 and not out.shell_restarted, out
    return out.stdout


def _hits() -> float:
    return REGISTRY.get_sample_value("artfleet_sandbox_pool_hits_total", {"image": "local"}) or 0


async def test_a_plain_session_gets_a_running_shell_and_its_files(pooled: LocalBackend) -> None:
    await until_ready(pooled, 2)
    hits = _hits()
    spec = SessionSpec(files=[FileSpec(path="a/f.txt", content=b"hi")], job_id="j")
    info = await pooled.create_session(spec)
    held = pooled._sessions.get(info.session_id)
    assert held.repl is not None and held.repl.running and held.warming is None
    pid = held.repl_pid
    assert await run(pooled, info.session_id, "cat a/f.txt; echo; pwd") == (
        f"hi\n{held.workdir}\n".encode()
    )
    assert held.repl_pid == pid and held.job_id == "j" and _hits() == hits + 1
    await until_ready(pooled, 2)  # taken, then refilled in the background
    # On disk, a held session is told from those waiting (a leak check counts dirs).
    assert sorted(_waiting_marks(held.root)) == [False, True, True]
    assert await pooled.close_session(info.session_id)
    assert not os.path.exists(held.root)  # noqa: ASYNC240


def _waiting_marks(one: str) -> list[bool]:
    """Whether each session dir beside `one` is marked as waiting in the pool."""
    parent = os.path.dirname(one)
    dirs = [os.path.join(parent, d) for d in os.listdir(parent) if d.startswith("s-")]
    return [os.path.exists(os.path.join(d, WAITING_MARKER)) for d in dirs]


async def test_sessions_with_their_own_env_or_a_stateless_one_are_made_fresh(
    pooled: LocalBackend,
) -> None:
    await until_ready(pooled, 2)
    with_env = await pooled.create_session(SessionSpec(env={"K": "v"}))
    assert await run(pooled, with_env.session_id, 'echo "$K"') == b"v\n"
    stateless = await pooled.create_session(SessionSpec(repl=False))
    assert pooled._sessions.get(stateless.session_id).repl is None
    assert pooled._warm.ready(False) == 2  # neither came from the pool


async def test_a_waiting_shell_that_died_is_not_handed_out(pooled: LocalBackend) -> None:
    await until_ready(pooled, 2)
    waiting = list(pooled._warm._ready[False])
    for session in waiting:  # as the OOM killer or a stray kill would
        await pooled._kill_repl(session)
    deadline = time.monotonic() + 30
    while any(s.repl is not None and s.repl.running for s in waiting):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    info = await pooled.create_session(SessionSpec())
    held = pooled._sessions.get(info.session_id)
    assert held not in waiting
    assert await run(pooled, info.session_id, "echo ok") == b"ok\n"


async def test_stop_ends_the_waiting_shells(backend_factory: Callable[..., LocalBackend]) -> None:
    backend = backend_factory(session_pool_size=2)
    try:
        await backend.start()
    except SandboxError as exc:
        pytest.skip(str(exc))
    await until_ready(backend, 2)
    pids = [s.repl_pid for s in backend._warm._ready[False]]
    await backend.stop()
    # SIGKILLed by stop(); gone once the event loop's child watcher has reaped them, which
    # a loaded machine delays: wait for that, with a deadline only a survivor reaches.
    deadline = time.monotonic() + 30
    while alive := [pid for pid in pids if _exists(pid)]:
        assert time.monotonic() < deadline, f"shells left: {alive}"
        await asyncio.sleep(0.1)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
