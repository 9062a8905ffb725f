"""The session skeleton every sandbox backend shares; a backend supplies the hooks.

What is the same on every backend lives here once: the argument checks, the session
table (lookup with the right error, `in_use`), Exec's choice between the session's REPL
and a stateless command, the REPL's wiring (made on first use, warmed at open), RunTests
(the `{junitxml}` templating, the output caps, the report), closing, and the reaper loop.
A backend implements the abstract hooks of `SessionBackend`: run one command, spawn and
kill the REPL's shell, put and read files, place and fetch the JUnit report, end a
session's processes and remove its workspace (docs/sandbox.md, "A new backend").
"""

from __future__ import annotations

import abc
import asyncio
import logging
import math
import shlex
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, Self, TypeVar

from artfleet.runtime.tasks import cancel_and_wait
from artfleet_sandbox import metrics
from artfleet_sandbox.backend import (
    CapacityExceeded,
    CaseResult,
    ExecOutcome,
    ExecSpec,
    FileSpec,
    InvalidArgument,
    RunTestsReport,
    SandboxError,
    SessionInfo,
    check_command,
    check_env,
)
from artfleet_sandbox.replshell import ReplCall, ReplChannel, ReplShell, ReplSink
from artfleet_sandbox.sessions import SessionTable

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class BaseSession:
    """What the skeleton keeps of every session; a backend adds where the session lives."""

    id: str
    job_id: str
    env: dict[str, str]  # the session's own environment, under every call's
    network: bool
    ttl_s: float  # idle time after which the reaper closes it
    repl_default: bool = True  # Exec's default mode: the REPL, or stateless
    repl: ReplShell | None = None  # made on the first REPL call
    warming: asyncio.Task[None] | None = None  # the REPL shell starting at session open
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0


class SessionConfig(Protocol):
    """The settings the skeleton reads; every backend's config has them."""

    @property
    def max_sessions(self) -> int: ...

    @property
    def idle_ttl_s(self) -> float: ...

    @property
    def reap_interval_s(self) -> float: ...

    @property
    def test_command(self) -> str: ...  # `{junitxml}` stands for the report's path

    @property
    def test_output_bytes(self) -> int: ...

    @property
    def stop_timeout_s(self) -> float: ...


@dataclass(frozen=True)
class RunCall:
    """One stateless command (a fresh shell), its text already checked."""

    command: str
    timeout_s: float
    max_output_bytes: int  # the head kept of each stream
    cwd: str = ""  # relative to the workspace; "" = its root
    env: Mapping[str, str] = field(default_factory=dict)  # over the session's own
    stdin: bytes = b""
    tail_bytes: int = 0  # also keep this much of the end
    merge: bool = False  # stderr goes into stdout, in arrival order


# -- pure logic ------------------------------------------------------------------------


def templated_test_command(template: str, report: str) -> str:
    """The test command with `{junitxml}` standing for `report`, shell-quoted. A plain
    replace: shell text is full of braces that str.format would choke on."""
    return template.replace("{junitxml}", shlex.quote(report))


def run_tests_call(command: str, timeout_s: float, output_bytes: int) -> RunCall:
    """RunTests keeps a quarter of its output cap from the head and the rest from the
    tail, stderr merged: pytest's summary sits at the end."""
    head = output_bytes // 4
    return RunCall(command, timeout_s, head, tail_bytes=output_bytes - head, merge=True)


def run_tests_report(result: ExecOutcome, tests: Sequence[CaseResult]) -> RunTestsReport:
    return RunTestsReport(
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        duration_s=result.duration_s,
        output=result.stdout.decode("utf-8", errors="replace"),
        tests=tests,
    )


def expiry_reason(session: BaseSession, now: float, max_lifetime_s: float) -> str | None:
    """Why the reaper closes the session now ("lifetime", "idle"), or None."""
    if now - session.created > max_lifetime_s:
        return "lifetime"  # even when busy: max lifetime is a hard bound
    if session.busy == 0 and now - session.last_used > session.ttl_s:
        return "idle"
    return None


S = TypeVar("S", bound=BaseSession)


class SessionBackend(abc.ABC, Generic[S]):
    """The calls of `SandboxBackend` that act on sessions, over a backend's hooks.

    A subclass sets `name` and `config`, calls `__init__` with its replica id, opens
    sessions itself (`create_session`, with `_admit`, `_start_warming` and `_opened`),
    and implements the abstract hooks below. Hooks that take a session run while the
    session counts as busy, so the reaper leaves it alone.
    """

    name: str
    config: SessionConfig

    def __init__(self, replica_id: str, drain_limit_bytes: int = 0) -> None:
        self._sessions: SessionTable[S] = SessionTable(replica_id)
        self._reaper: asyncio.Task[None] | None = None
        self.running = False  # started and not stopped: sessions may open
        self.drain_limit_bytes = drain_limit_bytes  # kill a REPL call past this much output

    # -- hooks -------------------------------------------------------------------------

    @abc.abstractmethod
    async def _prepare(self) -> None:
        """At start, before sessions may open: what the backend needs (an engine, a dir)."""

    @abc.abstractmethod
    async def _shutdown(self) -> None:
        """At stop, sessions no longer opening: close them all (`close_all`, within
        `_within_stop_timeout`) and release what `_prepare` took."""

    @abc.abstractmethod
    async def _run_command(self, session: S, call: RunCall) -> ExecOutcome:
        """Run the call's command in a fresh shell of the session, in its cwd, with the
        session's env and then the call's, bounded as the call says."""

    @abc.abstractmethod
    async def _repl_cwd(self, session: S, cwd: str) -> str:
        """The absolute path, as the shell sees it, of a workspace-relative `cwd` (not
        empty); "" when it is the workspace itself and the shell may stay where it is."""

    @abc.abstractmethod
    async def _spawn_repl(self, session: S, sink: ReplSink) -> ReplChannel:
        """Start the session's REPL shell (`repl.py`'s driver) feeding `sink`."""

    @abc.abstractmethod
    async def _kill_repl(self, session: S) -> None:
        """Kill the shell and everything it started (a timeout or a flood)."""

    @abc.abstractmethod
    async def _put_files(self, session: S, files: Sequence[FileSpec]) -> None: ...

    @abc.abstractmethod
    async def _read(self, session: S, path: str, max_bytes: int) -> tuple[bytes, bool]:
        """At most `max_bytes` of the workspace file and whether it was cut short."""

    @abc.abstractmethod
    def _report_path(self, session: S) -> str:
        """A fresh path, as commands see it, for RunTests' JUnit report."""

    @abc.abstractmethod
    async def _fetch_report(self, session: S, report: str) -> list[CaseResult]:
        """The report's test cases ([] when there is none or it is too large); removes it."""

    @abc.abstractmethod
    async def _end_processes(self, session: S) -> None:
        """At close, the session out of the table: nothing it started runs (or writes)
        once this returns. Calls may still be in flight (`session.busy`)."""

    async def _remove_workspace(self, session: S) -> None:
        """After its processes and shell ended: remove what holds the session's files.
        Nothing to do where `_end_processes` removed it already."""

    async def _after_repl(self, session: S, outcome: ExecOutcome) -> ExecOutcome:
        """A REPL call's outcome, completed (e.g. `oom_killed`, which the shell cannot tell)."""
        return outcome

    # -- opening -----------------------------------------------------------------------

    def _admit(self, held: int, env: Mapping[str, str]) -> None:
        """May one more session (or stdio process) open, with `held` open already?"""
        if not self.running:
            raise SandboxError("backend not started")
        if held >= self.config.max_sessions:
            raise CapacityExceeded(f"this replica holds {self.config.max_sessions} sessions")
        check_env(env)

    def _idle_ttl(self, requested_s: float) -> float:
        """A new session's idle TTL: the one asked for, or the backend's default for 0."""
        if requested_s < 0:
            raise InvalidArgument("idle_ttl_s must not be negative")
        return requested_s or self.config.idle_ttl_s

    def _start_warming(self, session: S) -> None:
        if session.repl_default:
            # The shell (bash under bubblewrap, a `docker exec`: most of a first command's
            # time) starts while the client asks its model for the first command.
            session.warming = asyncio.create_task(self._warm_repl(session))

    def _opened(
        self, session: S, source: str, started: float, workdir: str, isolation: str
    ) -> SessionInfo:
        """Counts the session opened (`started`: its time.perf_counter()) and describes it."""
        metrics.CREATE_SECONDS.labels(source).observe(time.perf_counter() - started)
        metrics.SESSIONS_CREATED.inc()
        return SessionInfo(session.id, workdir, self.name, isolation, self._sessions.replica_id)

    # -- commands, files, tests --------------------------------------------------------

    async def _run(self, session: S, call: RunCall) -> ExecOutcome:
        check_command(call.command)
        check_env(call.env)
        with self._sessions.in_use(session):
            outcome = await self._run_command(session, call)
        if outcome.oom_killed:
            metrics.OOM_KILLS.inc()
        return outcome

    async def exec(self, session_id: str, spec: ExecSpec) -> ExecOutcome:
        if spec.timeout_s <= 0 or spec.max_output_bytes < 0:
            raise InvalidArgument("timeout_s must be positive and max_output_bytes not negative")
        session = self._sessions.get(session_id)
        if spec.use_repl(session.repl_default):
            return await self._repl_exec(session, spec)
        call = RunCall(
            spec.command, spec.timeout_s, spec.max_output_bytes, spec.cwd, spec.env, spec.stdin
        )
        return await self._run(session, call)

    async def write_files(self, session_id: str, files: Sequence[FileSpec]) -> int:
        session = self._sessions.get(session_id)
        with self._sessions.in_use(session):
            await self._put_files(session, files)
        return len(files)

    async def read_file(self, session_id: str, path: str, max_bytes: int) -> tuple[bytes, bool]:
        if max_bytes < 0:
            raise InvalidArgument("max_bytes must not be negative")
        session = self._sessions.get(session_id)
        with self._sessions.in_use(session):
            return await self._read(session, path, max_bytes)

    async def run_tests(self, session_id: str, command: str, timeout_s: float) -> RunTestsReport:
        if timeout_s <= 0:
            raise InvalidArgument("timeout_s must be positive")
        session = self._sessions.get(session_id)
        report = self._report_path(session)
        text = templated_test_command(command or self.config.test_command, report)
        result = await self._run(
            session, run_tests_call(text, timeout_s, self.config.test_output_bytes)
        )
        with self._sessions.in_use(session):
            tests = await self._fetch_report(session, report)
        return run_tests_report(result, tests)

    # -- the session's REPL --------------------------------------------------------------

    def _repl_of(self, session: S) -> ReplShell:
        if session.repl is None:
            session.repl = ReplShell(
                lambda sink: self._spawn_repl(session, sink),
                lambda: self._kill_repl(session),
                self.name,
            )
        return session.repl

    async def _warm_repl(self, session: S) -> None:
        try:
            await self._repl_of(session).start()
        except Exception as exc:  # the first call starts it again and reports the error
            log.debug("session %s: shell not started at open: %s", session.id, exc)

    async def _repl_exec(self, session: S, spec: ExecSpec) -> ExecOutcome:
        check_command(spec.command)
        check_env(spec.env)
        with self._sessions.in_use(session):
            cwd = await self._repl_cwd(session, spec.cwd) if spec.cwd else ""
            call = ReplCall(
                spec.command,
                spec.timeout_s,
                spec.max_output_bytes,
                cwd=cwd,
                env=dict(spec.env),
                stdin=spec.stdin,
                drain_limit_bytes=self.drain_limit_bytes,
            )
            outcome = await self._after_repl(session, await self._repl_of(session).run(call))
        if outcome.oom_killed:
            metrics.OOM_KILLS.inc()
        return outcome

    # -- closing -----------------------------------------------------------------------

    async def _teardown(self, session: S) -> None:
        """Ends a session that is out of the table: its processes, its shell, its files."""
        await self._end_processes(session)
        if session.warming is not None:
            await session.warming  # a shell it starts from now on is the stop's to end
        if session.repl is not None:
            await session.repl.stop()
        await self._remove_workspace(session)

    async def close_session(self, session_id: str) -> bool:
        session = self._sessions.pop(session_id)
        if session is None:
            return False
        await self._teardown(session)
        return True

    async def close_all(self) -> int:
        results = await asyncio.gather(*(self.close_session(sid) for sid in self._sessions.ids()))
        return sum(results)

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Once: `_prepare`, then sessions may open and the reaper runs."""
        if self.running:
            return
        await self._prepare()
        self.running = True
        self._start_reaper()

    async def stop(self) -> None:
        """The reaper stops and sessions may no longer open; then `_shutdown`."""
        await self._stop_reaper()
        if not self.running:
            return
        self.running = False
        await self._shutdown()

    async def _within_stop_timeout(self, work: Awaitable[object], what: str) -> None:
        try:
            await asyncio.wait_for(work, self.config.stop_timeout_s)
        except TimeoutError:
            log.warning("%s took over %.0f s", what, self.config.stop_timeout_s)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- reaper ------------------------------------------------------------------------

    async def reap(self) -> int:
        """One pass of the reaper; returns how many sessions (or leftovers) it removed."""
        return await self._reap_sessions()

    async def _reap_sessions(self, max_lifetime_s: float = math.inf) -> int:
        """Close sessions idle past their TTL or older than `max_lifetime_s`."""
        now = time.monotonic()
        closed = 0
        for session in self._sessions.values():
            reason = expiry_reason(session, now, max_lifetime_s)
            if reason and await self.close_session(session.id):
                metrics.REAPED_SESSIONS.labels(reason).inc()
                log.info("reaped session %s (%s)", session.id, reason)
                closed += 1
        return closed

    def _start_reaper(self) -> None:
        self._reaper = asyncio.create_task(self._reap_forever(), name="sandbox-reaper")

    async def _stop_reaper(self) -> None:
        if self._reaper is not None:
            await cancel_and_wait(self._reaper)
            self._reaper = None

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.reap_interval_s)
            try:
                await self.reap()
            except Exception:  # the engine may be down a moment, a session odd: next round
                log.exception("reaper pass failed")
