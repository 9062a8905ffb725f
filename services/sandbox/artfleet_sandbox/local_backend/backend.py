"""The `local` backend: one temporary directory per session, commands as host processes.

For machines without Docker. With bubblewrap on PATH each command runs in fresh
namespaces (read-only root, private /tmp, no network unless asked, other sessions
hidden) and, when the server runs as root, as an unprivileged host user (`run_as`).
Without it commands would be plain processes of the server's user: the backend refuses
to start unless `allow_unisolated` says that is wanted, and every session says so in its
`isolation` field.

A session dir: `session_dirs`. Plain sessions come from a warm pool, their shell already
up (`warm_sessions`).

Sessions get a Python with pytest that does not depend on the host's (`pyruntime`): its
`bin/` leads their PATH, and `isolation` names it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence

from artfleet_sandbox.backend import (
    CaseResult,
    ExecOutcome,
    FileSpec,
    ImageReport,
    InvalidArgument,
    SandboxError,
    SessionInfo,
    SessionSpec,
)
from artfleet_sandbox.junit import collect_report
from artfleet_sandbox.local_backend.bwrap import (
    UNISOLATED_NOTICE,
    Bubblewrap,
    find_bubblewrap,
    unisolated_refusal,
)
from artfleet_sandbox.local_backend.config import ISOLATION_BWRAP, ISOLATION_NONE, LocalConfig
from artfleet_sandbox.local_backend.prepared_dirs import SeededDirs
from artfleet_sandbox.local_backend.replio import LocalChannel
from artfleet_sandbox.local_backend.session import LocalSession, spawn_errors
from artfleet_sandbox.local_backend.session_dirs import (
    make_session_dir,
    mark_waiting,
    write_files,
)
from artfleet_sandbox.local_backend.stale import PREFIX as STALE_PREFIX
from artfleet_sandbox.local_backend.stale import remove_stale, write_owner
from artfleet_sandbox.local_backend.stdio import LocalStdio
from artfleet_sandbox.local_backend.warm_sessions import WarmSessions
from artfleet_sandbox.paths import read_file, remove_tree, resolve_dir
from artfleet_sandbox.procs import TAG_VAR, kill_group, kill_tagged, rlimit_prefix, run_process
from artfleet_sandbox.pyruntime import PyRuntime, default_cache_dir, prepare_runtime
from artfleet_sandbox.repl import shell_argv
from artfleet_sandbox.replica import ReplicaIdentity, new_replica_id, new_session_id
from artfleet_sandbox.replshell import ReplSink
from artfleet_sandbox.repocache import RepoCache
from artfleet_sandbox.session_base import RunCall, SessionBackend
from artfleet_sandbox.stdio import StdioProcess, StdioSpec

log = logging.getLogger(__name__)

_CLOSE_WAIT_S = 3.0


class LocalBackend(SessionBackend[LocalSession]):
    """Sessions in temporary dirs, owned by this instance and removed on close."""

    name = "local"
    config: LocalConfig

    def __init__(self, config: LocalConfig | None = None) -> None:
        self.config = config or LocalConfig()
        self.replica_id = self.config.replica_id or new_replica_id()
        super().__init__(self.replica_id)
        self._root = ""
        self._bwrap: Bubblewrap | None = None
        self._owner: tuple[int, int] | None = None  # of session files, when not ours
        self._shell = shutil.which("bash", path=self.config.path) or "/bin/sh"
        self._limits = rlimit_prefix(self.config.rlimits)
        self._runtime: PyRuntime | None = None
        self._runtime_error = ""
        self.repos = RepoCache(self.config.cache_dir or default_cache_dir())
        self._seeded = SeededDirs(
            self.config.repo_pool_size,
            lambda tarball: asyncio.to_thread(self._make_session_dir, (), tarball),
            lambda root: asyncio.to_thread(remove_tree, root),
        )
        self._warm = WarmSessions(self.config.session_pool_size, self._open_warm, self._teardown)

    @property
    def root(self) -> str:
        """This backend's own dir, one session dir per session in it ("" until started)."""
        return self._root

    # -- lifecycle ---------------------------------------------------------------------

    async def _prepare(self) -> None:
        cfg = self.config
        expose = list(cfg.bwrap_expose_paths)
        if cfg.test_runtime:
            await self._prepare_runtime()
        if self._runtime is not None:  # its interpreter may live under a hidden dir
            expose += [self._runtime.root, self._runtime.base_prefix]
        self._bwrap = await find_bubblewrap(
            cfg.use_bwrap, cfg.path, cfg.bwrap_hide_paths, expose, cfg.run_as
        )
        if self._bwrap is None:
            if not cfg.allow_unisolated:
                raise SandboxError(unisolated_refusal(cfg.use_bwrap))
            log.warning(UNISOLATED_NOTICE)
        elif self._bwrap.drop:
            self._owner = cfg.run_as
        self._root = await asyncio.to_thread(self._make_root)
        self._warm.fill(network=False)
        log.info("local sandbox backend at %s, isolation: %s", self._root, self.isolation())

    async def _shutdown(self) -> None:
        await self._seeded.stop()
        await self._warm.stop()
        await self._within_stop_timeout(self.close_all(), "closing sessions")  # then removed
        await asyncio.to_thread(remove_tree, self._root)
        self._root = ""

    def _make_root(self) -> str:
        parent = self.config.workspace_root or tempfile.gettempdir()
        os.makedirs(parent, exist_ok=True)
        # What a killed replica left (it never ran stop()); never a live replica's dir.
        me = ReplicaIdentity.current(self.replica_id, container_id="")
        remove_stale(parent, me)
        # Our own dir: stop() removes it, and other replicas' sessions are never touched.
        root = os.path.realpath(tempfile.mkdtemp(prefix=STALE_PREFIX, dir=parent))
        write_owner(root, me)
        if self._owner:
            os.chmod(root, 0o711)  # the sandbox user may reach its own session dir, not list
        return root

    async def _prepare_runtime(self) -> None:
        cache_dir = self.config.cache_dir or default_cache_dir()
        try:
            self._runtime = await asyncio.to_thread(prepare_runtime, cache_dir)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            # Sessions still work; RunTests then depends on the host, and isolation says so.
            self._runtime_error = str(exc)
            log.error("no test runtime for sessions: %s", exc)

    def isolation(self, network: bool = False) -> str:
        if self._bwrap is None:
            return ISOLATION_NONE
        return f"{ISOLATION_BWRAP} (host network)" if network else ISOLATION_BWRAP

    def session_isolation(self, network: bool = False) -> str:
        """`isolation` and the Python that runs the session's tests."""
        if self._runtime is not None:
            return f"{self.isolation(network)}; tests: {self._runtime.describe()}"
        why = self._runtime_error or "runtime off"
        return f"{self.isolation(network)}; tests: the host's python only ({why})"

    # -- sessions ----------------------------------------------------------------------

    async def create_session(self, spec: SessionSpec) -> SessionInfo:
        self._admit(len(self._sessions), spec.env)
        ttl_s = self._idle_ttl(spec.idle_ttl_s)
        started = time.perf_counter()
        session = await self._warm_session(spec)
        source = "pool" if session is not None else "process"
        if session is None:
            session = await self._new_session(spec)
        session.id = new_session_id(self.replica_id)
        session.job_id = spec.job_id
        session.ttl_s = ttl_s
        session.last_used = time.monotonic()
        self._sessions.add(session.id, session)
        isolation = self.session_isolation(spec.network)
        return self._opened(session, source, started, session.workdir, isolation)

    async def _new_session(self, spec: SessionSpec) -> LocalSession:
        tarball = await self.repos.tarball(spec.repo) if spec.repo else ""
        root = self._seeded.take(tarball) if tarball else None
        if root is not None:  # the repo is already there; only the files are written
            await asyncio.to_thread(self._write_to, root, spec.files)
        else:
            root = await asyncio.to_thread(self._make_session_dir, spec.files, tarball)
        session = self._session_at(root, spec.network, dict(spec.env), spec.repl)
        self._start_warming(session)
        return session

    def _session_at(
        self, root: str, network: bool, env: dict[str, str], repl: bool = True
    ) -> LocalSession:
        """A session in `root`; its id, job and TTL are set when it is handed out."""
        return LocalSession(
            id="",
            root=root,
            tag=secrets.token_hex(8),
            env=env,
            network=network,
            job_id="",
            ttl_s=self.config.idle_ttl_s,
            repl_default=repl,
        )

    async def _warm_session(self, spec: SessionSpec) -> LocalSession | None:
        """A waiting session with its shell up, for a plain spec (no repo, no env of its
        own, the REPL on), its files written; None when none waits (or for another spec)."""
        if spec.repo or spec.env or not spec.repl:
            return None
        session = self._warm.take(spec.network)
        if session is not None:
            await asyncio.to_thread(mark_waiting, session.root, False)
        if session is not None and spec.files:
            try:
                await asyncio.to_thread(self._write_all, session, spec.files)
            except BaseException:
                await self._teardown(session)
                raise
        return session

    async def _open_warm(self, network: bool) -> LocalSession:
        """A session for the warm pool: its dir made and its shell started."""
        root = await asyncio.to_thread(self._make_session_dir, ())
        await asyncio.to_thread(mark_waiting, root, True)
        session = self._session_at(root, network, {})
        try:
            await self._repl_of(session).start()
        except BaseException:
            await self._teardown(session)
            raise
        return session

    async def _end_processes(self, session: LocalSession) -> None:
        # Kill first: a live process could keep writing while the tree is removed. A call
        # in flight may spawn its command just after a scan, so scan until none is left.
        deadline = time.monotonic() + _CLOSE_WAIT_S
        await asyncio.to_thread(kill_tagged, session.tag + ".")
        while session.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            await asyncio.to_thread(kill_tagged, session.tag + ".")

    async def _remove_workspace(self, session: LocalSession) -> None:
        await asyncio.to_thread(remove_tree, session.root)

    async def open_stdio(self, spec: StdioSpec) -> StdioProcess:
        return await LocalStdio.start(spec, self.config.allow_stdio, self.config.path)

    async def check_images(self, images: Sequence[str]) -> ImageReport:
        # Sessions here are directories on the host: a task that needs its image (the
        # repo at /testbed, its own interpreter) cannot run on this backend at all.
        return ImageReport(sorted(set(images)), pull_allowed=False, runs_images=False)

    # -- files -------------------------------------------------------------------------

    def _make_session_dir(self, files: Sequence[FileSpec], tarball: str = "") -> str:
        return make_session_dir(self._root, files, tarball, self._owner)

    def _write_to(self, root: str, files: Sequence[FileSpec]) -> None:
        try:
            write_files(os.path.join(root, "work"), files, self._owner)
        except BaseException:
            remove_tree(root)
            raise

    def repo_pool_ready(self, tarball: str) -> int:
        """Session dirs holding this repo waiting now (the bench waits on it)."""
        return self._seeded.ready(tarball)

    def _write_all(self, session: LocalSession, files: Sequence[FileSpec]) -> None:
        write_files(session.workdir, files, self._owner)

    async def _put_files(self, session: LocalSession, files: Sequence[FileSpec]) -> None:
        await asyncio.to_thread(self._write_all, session, files)

    async def _read(self, session: LocalSession, path: str, max_bytes: int) -> tuple[bytes, bool]:
        return await asyncio.to_thread(read_file, session.workdir, path, max_bytes)

    def _report_path(self, session: LocalSession) -> str:
        return os.path.join(session.root, "reports", f"junit-{secrets.token_hex(6)}.xml")

    async def _fetch_report(self, session: LocalSession, report: str) -> list[CaseResult]:
        reports_dir, name = os.path.split(report)
        return await asyncio.to_thread(collect_report, reports_dir, name)

    # -- commands ----------------------------------------------------------------------

    def _env(self, session: LocalSession, extra: Mapping[str, str]) -> dict[str, str]:
        # Built from scratch: the server's own environment (API token, cloud keys) must
        # never reach a sandboxed command.
        path = self.config.path
        if self._runtime is not None:
            path = f"{self._runtime.bin_dir}:{path}"
        env = {
            "PATH": path,
            "HOME": os.path.join(session.root, "home"),
            "TMPDIR": os.path.join(session.root, "tmp"),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }
        env.update(session.env)
        env.update(extra)
        env[TAG_VAR] = f"{session.tag}.{secrets.token_hex(8)}"  # set last: not overridable
        return env

    def _argv(self, session: LocalSession, cwd: str, command: str) -> list[str]:
        shell = [self._shell, "-c", command]
        if self._bwrap is None:
            return shell
        return self._bwrap.argv(
            session_root=session.root,
            others_root=self._root,
            cwd=cwd,
            network=session.network,
            command=shell,
        )

    async def _run_command(self, session: LocalSession, call: RunCall) -> ExecOutcome:
        with spawn_errors():
            real_cwd = await asyncio.to_thread(resolve_dir, session.workdir, call.cwd)
            return await run_process(
                self._argv(session, real_cwd, call.command),
                cwd=real_cwd,
                env=self._env(session, call.env),
                timeout_s=call.timeout_s,
                max_output_bytes=call.max_output_bytes,
                stdin=call.stdin,
                tail_bytes=call.tail_bytes,
                merge_stderr=call.merge,
                argv_prefix=self._limits,
            )

    # -- the session's REPL --------------------------------------------------------------

    async def _spawn_repl(self, session: LocalSession, sink: ReplSink) -> LocalChannel:
        # A tag of its own: a timeout kills the shell's tree, not the session's other calls.
        env = self._env(session, {})
        session.repl_tag = env[TAG_VAR]
        if os.path.basename(self._shell) != "bash":
            raise InvalidArgument("the REPL needs bash on the sandbox PATH: use mode STATELESS")
        argv = shell_argv(self._shell)
        if self._bwrap is not None:
            argv = self._bwrap.argv(
                session_root=session.root,
                others_root=self._root,
                cwd=session.workdir,
                network=session.network,
                command=argv,
            )
        with spawn_errors():
            channel = await LocalChannel.start(sink, [*self._limits, *argv], session.workdir, env)
        session.repl_pid = channel.pid
        return channel

    async def _kill_repl(self, session: LocalSession) -> None:
        if session.repl_pid > 0:
            kill_group(session.repl_pid)
        if session.repl_tag:
            await asyncio.to_thread(kill_tagged, session.repl_tag)  # and what left the group

    async def _repl_cwd(self, session: LocalSession, cwd: str) -> str:
        return await asyncio.to_thread(resolve_dir, session.workdir, cwd)
