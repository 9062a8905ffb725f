"""The session skeleton every backend shares (`session_base`), over a backend of plain
dirs and processes that implements the hooks and nothing else."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import pytest
from prometheus_client import REGISTRY

from artfleet_sandbox.backend import (
    CapacityExceeded,
    CaseResult,
    ExecOutcome,
    ExecSpec,
    FileSpec,
    InvalidArgument,
    SandboxError,
    SessionElsewhere,
    SessionInfo,
    SessionNotFound,
    SessionSpec,
)
from artfleet_sandbox.junit import collect_report
from artfleet_sandbox.local_backend.replio import LocalChannel
from artfleet_sandbox.paths import read_file, remove_tree, resolve_dir, write_file
from artfleet_sandbox.procs import TAG_VAR, kill_group, kill_tagged, run_process
from artfleet_sandbox.repl import shell_argv
from artfleet_sandbox.replica import new_replica_id, new_session_id
from artfleet_sandbox.replshell import ReplSink
from artfleet_sandbox.session_base import (
    BaseSession,
    RunCall,
    SessionBackend,
    expiry_reason,
    run_tests_call,
    templated_test_command,
)

pytestmark = pytest.mark.timeout(120)


# -- pure logic ------------------------------------------------------------------------


def test_the_report_path_is_quoted_and_other_braces_stay() -> None:
    text = templated_test_command("pytest --junitxml={junitxml} && echo ${HOME}{}", "/r d/j.xml")
    assert text == "pytest --junitxml='/r d/j.xml' && echo ${HOME}{}"


def test_run_tests_keeps_a_quarter_head_and_the_rest_tail_merged() -> None:
    call = run_tests_call("pytest", 30.0, 401)
    assert (call.max_output_bytes, call.tail_bytes, call.merge) == (100, 301, True)
    assert (call.command, call.cwd, dict(call.env), call.stdin) == ("pytest", "", {}, b"")


def _aged(created: float, last_used: float, busy: int = 0) -> BaseSession:
    session = BaseSession(id="s", job_id="", env={}, network=False, ttl_s=10.0, busy=busy)
    session.created, session.last_used = created, last_used
    return session


@pytest.mark.parametrize(
    ("created", "last_used", "busy", "reason"),
    [
        (0.0, 95.0, 0, None),  # used 5 s ago
        (0.0, 85.0, 0, "idle"),  # idle 15 s, TTL 10 s
        (0.0, 85.0, 1, None),  # a call still runs: never idle
        (-1000.0, 99.0, 1, "lifetime"),  # past the lifetime even while busy
    ],
)
def test_expiry_reason(created: float, last_used: float, busy: int, reason: str | None) -> None:
    assert expiry_reason(_aged(created, last_used, busy), 100.0, 500.0) == reason


# -- the skeleton over a backend of plain dirs -----------------------------------------


@dataclass(frozen=True)
class DirConfig:
    max_sessions: int = 2
    idle_ttl_s: float = 600.0
    reap_interval_s: float = 3600.0
    test_command: str = "true"
    test_output_bytes: int = 64 * 1024
    stop_timeout_s: float = 10.0


@dataclass(kw_only=True)
class DirSession(BaseSession):
    root: str
    tag: str = field(default_factory=lambda: secrets.token_hex(8))
    shell_pid: int = 0


class DirBackend(SessionBackend[DirSession]):
    """No isolation at all: what a backend must write, and no more."""

    name = "dirs"
    config: DirConfig

    def __init__(self, parent: str, config: DirConfig) -> None:
        super().__init__(new_replica_id())
        self.config = config
        self.parent = parent
        self.events: list[str] = []  # hooks that ran, with the session's busy count

    async def _prepare(self) -> None:
        self.events.append("prepare")

    async def _shutdown(self) -> None:
        await self._within_stop_timeout(self.close_all(), "closing sessions")

    async def create_session(self, spec: SessionSpec) -> SessionInfo:
        self._admit(len(self._sessions), spec.env)
        started = time.perf_counter()
        session_id = new_session_id(self._sessions.replica_id)
        root = os.path.join(self.parent, session_id)
        os.mkdir(root)
        session = DirSession(
            id=session_id,
            job_id=spec.job_id,
            env=dict(spec.env),
            network=spec.network,
            ttl_s=spec.idle_ttl_s or self.config.idle_ttl_s,
            repl_default=spec.repl,
            root=root,
        )
        self._sessions.add(session_id, session)
        await self._put_files(session, spec.files)
        self._start_warming(session)
        return self._opened(session, "process", started, root, "none")

    def _env(self, session: DirSession) -> dict[str, str]:
        return {"PATH": os.environ["PATH"], **session.env, TAG_VAR: f"{session.tag}.x"}

    async def _run_command(self, session: DirSession, call: RunCall) -> ExecOutcome:
        self.events.append(f"run busy={session.busy}")
        return await run_process(
            ["bash", "-c", call.command],
            cwd=resolve_dir(session.root, call.cwd),
            env={**self._env(session), **call.env},
            timeout_s=call.timeout_s,
            max_output_bytes=call.max_output_bytes,
            stdin=call.stdin,
            merge_stderr=call.merge,
            tail_bytes=call.tail_bytes,
        )

    async def _repl_cwd(self, session: DirSession, cwd: str) -> str:
        return resolve_dir(session.root, cwd)

    async def _spawn_repl(self, session: DirSession, sink: ReplSink) -> LocalChannel:
        channel = await LocalChannel.start(sink, shell_argv(), session.root, self._env(session))
        session.shell_pid = channel.pid
        return channel

    async def _kill_repl(self, session: DirSession) -> None:
        kill_group(session.shell_pid)

    async def _put_files(self, session: DirSession, files: Sequence[FileSpec]) -> None:
        self.events.append(f"put busy={session.busy}")
        for spec in files:
            write_file(session.root, spec)

    async def _read(self, session: DirSession, path: str, max_bytes: int) -> tuple[bytes, bool]:
        return read_file(session.root, path, max_bytes)

    def _report_path(self, session: DirSession) -> str:
        return os.path.join(session.root, f"junit {secrets.token_hex(4)}.xml")

    async def _fetch_report(self, session: DirSession, report: str) -> list[CaseResult]:
        self.events.append(f"fetch busy={session.busy}")
        return collect_report(*os.path.split(report))

    async def _end_processes(self, session: DirSession) -> None:
        self.events.append("end processes")
        kill_tagged(session.tag + ".")

    async def _remove_workspace(self, session: DirSession) -> None:
        self.events.append("remove workspace")
        remove_tree(session.root)


@pytest.fixture
async def dirs(tmp_path: str) -> AsyncIterator[DirBackend]:
    backend = DirBackend(str(tmp_path), DirConfig())
    async with backend:
        yield backend


def _spec(command: str, **kw: object) -> ExecSpec:
    return ExecSpec(command=command, timeout_s=30, max_output_bytes=1 << 16, **kw)  # type: ignore[arg-type]


async def test_sessions_open_only_while_started_and_up_to_the_cap(tmp_path: str) -> None:
    backend = DirBackend(str(tmp_path), DirConfig(max_sessions=1))
    with pytest.raises(SandboxError, match="not started"):
        await backend.create_session(SessionSpec())
    async with backend:
        with pytest.raises(InvalidArgument):
            await backend.create_session(SessionSpec(env={"BAD NAME": "x"}))
        info = await backend.create_session(SessionSpec(repl=False))
        assert info.backend == "dirs" and info.replica == backend._sessions.replica_id
        with pytest.raises(CapacityExceeded):
            await backend.create_session(SessionSpec())
    assert backend.events[0] == "prepare"
    assert not await asyncio.to_thread(os.path.exists, info.workdir)
    with pytest.raises(SandboxError, match="not started"):
        await backend.create_session(SessionSpec())


async def test_calls_check_their_arguments_and_the_session_id(dirs: DirBackend) -> None:
    sid = (await dirs.create_session(SessionSpec(repl=False))).session_id
    with pytest.raises(InvalidArgument):
        await dirs.exec(sid, ExecSpec(command="true", timeout_s=0, max_output_bytes=1))
    with pytest.raises(InvalidArgument):
        await dirs.exec(sid, ExecSpec(command="true", timeout_s=1, max_output_bytes=-1))
    with pytest.raises(InvalidArgument):
        await dirs.exec(sid, _spec(" "))
    with pytest.raises(InvalidArgument):
        await dirs.read_file(sid, "x", -1)
    with pytest.raises(InvalidArgument):
        await dirs.run_tests(sid, "", 0)
    with pytest.raises(SessionNotFound):
        await dirs.exec(new_session_id(dirs._sessions.replica_id), _spec("true"))
    with pytest.raises(SessionElsewhere):
        await dirs.write_files(new_session_id(new_replica_id()), [])


async def test_stateless_exec_gets_cwd_env_and_stdin_and_counts_as_busy(dirs: DirBackend) -> None:
    spec = SessionSpec(repl=False, env={"A": "session", "B": "session"})
    sid = (await dirs.create_session(spec)).session_id
    assert await dirs.write_files(sid, [FileSpec("sub/f.txt", b"hi")]) == 1
    out = await dirs.exec(
        sid, _spec('cat f.txt; cat; echo " $A $B"', cwd="sub", env={"B": "call"}, stdin=b"!")
    )
    assert out.stdout == b"hi! session call\n" and out.exit_code == 0
    assert dirs._sessions.get(sid).repl is None  # a stateless session starts no shell
    assert "put busy=1" in dirs.events and "run busy=1" in dirs.events
    assert dirs._sessions.get(sid).busy == 0
    assert await dirs.read_file(sid, "sub/f.txt", 1) == (b"h", True)


async def test_the_repl_keeps_state_and_a_per_call_cwd(dirs: DirBackend) -> None:
    sid = (await dirs.create_session(SessionSpec(files=[FileSpec("d/x", b"")]))).session_id
    assert dirs._sessions.get(sid).warming is not None  # the shell starts at open
    await dirs.exec(sid, _spec("export K=v; f() { echo f$1; }"))
    out = await dirs.exec(sid, _spec('echo $K; f 1; basename "$PWD"', cwd="d"))
    assert out.stdout == b"v\nf1\nd\n" and not out.stateless
    again = await dirs.exec(sid, _spec('basename "$PWD"'))
    assert again.stdout.strip() == os.path.basename(dirs._sessions.get(sid).root).encode()
    stateless = await dirs.exec(sid, _spec("echo ${K:-unset}", mode="stateless"))
    assert stateless.stdout == b"unset\n" and stateless.stateless


async def test_run_tests_fills_in_the_report_path_and_reads_the_report(dirs: DirBackend) -> None:
    sid = (await dirs.create_session(SessionSpec(repl=False))).session_id
    xml = (
        '<testsuite><testcase name="t_ok"/><testcase name="t_bad"><failure/></testcase></testsuite>'
    )
    command = f"printf '%s' '{xml}' > {{junitxml}}; seq 1 20000; echo done >&2; exit 3"
    report = await dirs.run_tests(sid, command, 30)
    assert report.exit_code == 3 and not report.timed_out
    assert [(c.name, c.outcome) for c in report.tests] == [("t_ok", "passed"), ("t_bad", "failed")]
    assert report.output.startswith("1\n2\n") and report.output.endswith("20000\ndone\n")
    assert "omitted" in report.output  # 64 KiB cap: head and tail kept, the middle not
    assert "fetch busy=1" in dirs.events
    assert not [n for n in os.listdir(dirs._sessions.get(sid).root) if n.endswith(".xml")]


async def test_close_ends_processes_then_removes_the_workspace(dirs: DirBackend) -> None:
    info = await dirs.create_session(SessionSpec())
    await dirs.exec(info.session_id, _spec("true"))  # the shell is up
    assert await dirs.close_session(info.session_id)
    assert dirs.events[-2:] == ["end processes", "remove workspace"]
    assert not await asyncio.to_thread(os.path.exists, info.workdir)
    assert not await dirs.close_session(info.session_id)
    with pytest.raises(SessionNotFound):
        await dirs.exec(info.session_id, _spec("true"))


def _reaped(reason: str) -> float:
    value = REGISTRY.get_sample_value("artfleet_sandbox_reaped_sessions_total", {"reason": reason})
    return value or 0.0


async def test_the_reaper_closes_idle_sessions_but_not_busy_ones(tmp_path: str) -> None:
    async with DirBackend(str(tmp_path), DirConfig(max_sessions=3)) as backend:
        idle, busy, fresh = [
            (await backend.create_session(SessionSpec(repl=False))).session_id for _ in range(3)
        ]
        for sid in (idle, busy):
            backend._sessions.get(sid).last_used -= 3600  # past the 600 s TTL
        backend._sessions.get(busy).busy = 1  # a call still runs
        before = _reaped("idle")
        assert await backend.reap() == 1
        assert _reaped("idle") == before + 1
        assert set(backend._sessions.ids()) == {busy, fresh}
        backend._sessions.get(busy).created -= 3600
        assert await backend._reap_sessions(max_lifetime_s=60) == 1  # even a busy one
        assert backend._sessions.ids() == [fresh]
