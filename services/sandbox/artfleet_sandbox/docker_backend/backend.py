"""DockerBackend: sessions as containers, owned by this replica and removed on close."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from artfleet_sandbox import metrics
from artfleet_sandbox.backend import (
    CapacityExceeded,
    ExecOutcome,
    ExecSpec,
    FileSpec,
    ImageReport,
    InvalidArgument,
    Resources,
    RunTestsReport,
    SandboxError,
    SessionInfo,
    SessionSpec,
    check_command,
    check_env,
)
from artfleet_sandbox.docker_backend import config as c
from artfleet_sandbox.docker_backend.engine import DockerEngine, ExecCall, may_be_oom
from artfleet_sandbox.docker_backend.execio import ReadLimits
from artfleet_sandbox.docker_backend.pool import Pooled, WarmPool
from artfleet_sandbox.docker_backend.reaper import owner_containers, reap_reason
from artfleet_sandbox.docker_backend.replio import DockerChannel
from artfleet_sandbox.docker_backend.spec import (
    ContainerRequest,
    check_network,
    container_options,
    effective_resources,
)
from artfleet_sandbox.docker_backend.stdio import DockerStdio, image_argv
from artfleet_sandbox.junit import parse_junit
from artfleet_sandbox.paths import clean_relpath
from artfleet_sandbox.pyruntime import default_cache_dir
from artfleet_sandbox.replica import ReplicaIdentity, new_session_id
from artfleet_sandbox.replshell import ReplCall, ReplShell, ReplSink
from artfleet_sandbox.repocache import RepoCache
from artfleet_sandbox.sessions import SessionTable
from artfleet_sandbox.stdio import StdioProcess, StdioSpec

log = logging.getLogger(__name__)

# bash when the image has it (the proto's promise), plain sh otherwise.
_SHELL = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; else exec sh -c "$1"; fi'
_MAX_JUNIT_BYTES = 32 * 1024 * 1024
_NAME_SAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


def _shell_argv(command: str) -> list[str]:
    return ["/bin/sh", "-c", _SHELL, "sh", command]


@dataclass
class _Session:
    id: str
    container_id: str
    job_id: str
    env: dict[str, str]
    network: bool
    ttl_s: float
    repl_default: bool = True
    repl: ReplShell | None = None  # made on the first REPL call
    warming: asyncio.Task[None] | None = None  # the REPL shell starting at session open
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0


class DockerBackend:
    name = "docker"

    def __init__(self, config: c.DockerConfig | None = None) -> None:
        self.config = config or c.DockerConfig()
        self.identity = ReplicaIdentity.current(self.config.replica_id)
        self.engine = DockerEngine(self.config.docker_host, self.config.threads)
        self._uid = int(self.config.user.split(":")[0])
        self.repos = RepoCache(self.config.cache_dir or default_cache_dir(), self._uid)
        self._sessions: SessionTable[_Session] = SessionTable(self.replica_id)
        self._creating: set[str] = set()  # session ids whose container is on its way
        self._stdio: set[str] = set()  # ids of containers running an McpStdio process
        self._pool = WarmPool(
            self.config.pool_size,
            self.config.pool_max_age_s,
            self._create_pooled,
            self._remove,
            max_images=self.config.pool_max_images,
            keep=(self.config.default_image, *self.config.pool_images),
        )
        # Warm-pool keys of repo-seeded pools -> (image, the repo's tarball).
        self._seeded: dict[str, tuple[str, str]] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._renames: set[asyncio.Task[None]] = set()
        self._inflight: set[asyncio.Future[str]] = set()
        self._started = False

    @property
    def replica_id(self) -> str:
        return self.identity.replica_id

    def isolation(self, network: bool) -> str:
        net = "network" if network else "no network"
        return f"docker container ({net}, read-only root, non-root {self.config.user})"

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        await self.engine.connect()
        self._started = True
        removed = await self.reap()
        for image in dict.fromkeys([*self.config.pool_images]):
            await self.engine.ensure_image(image, self.config.pull)
            self._pool.refill(image)
        self._reaper = asyncio.create_task(self._reap_forever(), name="sandbox-reaper")
        log.info(
            "docker sandbox backend up: replica %s, deployment %r, %d leftover containers removed",
            self.replica_id,
            self.config.deployment,
            removed,
        )

    async def stop(self) -> None:
        if not self._started:
            return
        self._started = False
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        try:
            await asyncio.wait_for(self._remove_own(), self.config.stop_timeout_s)
        except TimeoutError:
            log.warning(
                "removing this replica's containers took over %.0f s", self.config.stop_timeout_s
            )
        await self.engine.close()

    async def _remove_own(self) -> None:
        pooled = await self._pool.stop()
        # Renames and container creations still running on engine threads.
        if self._renames:
            await asyncio.wait(self._renames)
        if self._inflight:
            await asyncio.wait(self._inflight)
        await self.close_all()
        await asyncio.gather(*(self._remove(cid) for cid in pooled))
        # Whatever else carries our replica id (a create cut short by the shutdown).
        leftovers = [
            item.id
            for item in await self.engine.list_managed(self.config.deployment)
            if item.labels.get(c.LABEL_REPLICA) == self.replica_id
        ]
        await asyncio.gather(*(self._remove(cid) for cid in leftovers))

    async def __aenter__(self) -> DockerBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- containers --------------------------------------------------------------------

    async def _start(self, req: ContainerRequest) -> str:
        self._creating.add(req.session_id)
        options = container_options(req, self.config, self.identity)
        # Cancelling the await does not stop the engine thread that creates the container:
        # keep the task, so stop() can wait for it and then remove what it made.
        task = asyncio.ensure_future(self.engine.start_container(options, self._uid))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        try:
            return await asyncio.shield(task)
        finally:
            self._creating.discard(req.session_id)

    async def _create_pooled(self, key: str) -> Pooled:
        image, tarball = self._seeded.get(key, (key, ""))
        session_id = new_session_id(self.replica_id)
        req = ContainerRequest(session_id, image, self.config.defaults, False, pooled=True)
        # `_start` tracks the id until it returns; the pool holds it from then on.
        container_id = await self._start(req)
        if tarball:
            self._creating.add(session_id)
            try:
                await self.engine.put_tarball(container_id, tarball)
            except BaseException:
                await asyncio.shield(self._remove(container_id))
                raise
            finally:
                self._creating.discard(session_id)
        return Pooled(container_id, session_id)

    def repo_pool_key(self, image: str, tarball: str) -> str:
        """The pool of `image` containers whose workspace already holds the repo: a
        session of a repo used before is then a pop, with no unpacking on its path."""
        key = f"{image}+repo-{os.path.basename(tarball)[:12]}"
        self._seeded[key] = (image, tarball)
        return key

    def _take_pooled(self, image: str, tarball: str) -> tuple[Pooled | None, bool]:
        """A warm container, and whether the repo is already in it."""
        if tarball and self.config.pool_repos:
            pooled = self._pool.take(self.repo_pool_key(image, tarball))
            if pooled is not None:
                return pooled, True
        return self._pool.take(image), False

    def pool_ready(self, image: str, tarball: str = "") -> int:
        """Warm containers of `image` waiting now (holding the repo of `tarball`, if
        given); the bench waits on it."""
        image = image or self.config.default_image
        return self._pool.ready(self.repo_pool_key(image, tarball) if tarball else image)

    async def _remove(self, container_id: str) -> bool:
        try:
            return await self.engine.remove(container_id)
        except SandboxError as exc:
            log.warning("could not remove container %s: %s", container_id[:12], exc)
            return False

    # -- sessions ----------------------------------------------------------------------

    async def _admit(self, spec: SessionSpec | StdioSpec, held: int) -> tuple[Resources, str]:
        """What a new session or stdio container gets, once it may have one: `held`
        counts against max_sessions; env and network are checked; the image is there."""
        if not self._started:
            raise SandboxError("backend not started")
        if held >= self.config.max_sessions:
            raise CapacityExceeded(f"this replica holds {self.config.max_sessions} sessions")
        check_env(spec.env)
        check_network(spec.network, self.config)
        resources = effective_resources(spec.resources, self.config.defaults, self.config.caps)
        image = spec.image or self.config.default_image
        await self.engine.ensure_image(image, self.config.pull)
        return resources, image

    async def create_session(self, spec: SessionSpec) -> SessionInfo:
        resources, image = await self._admit(spec, len(self._sessions) + len(self._creating))
        started = time.perf_counter()
        tarball = await self.repos.tarball(spec.repo) if spec.repo is not None else ""
        session_id, container_id, source, seeded = await self._container_for(
            spec, image, resources, tarball
        )
        session = _Session(
            id=session_id,
            container_id=container_id,
            job_id=spec.job_id,
            env=dict(spec.env),
            network=spec.network,
            ttl_s=spec.idle_ttl_s or self.config.idle_ttl_s,
            repl_default=spec.repl,
        )
        self._sessions.add(session_id, session)
        try:
            if tarball and not seeded:
                await self.engine.put_tarball(container_id, tarball)
            await self.engine.put_files(container_id, spec.files, self._uid)
        except BaseException:
            await self.close_session(session_id)
            raise
        if session.repl_default:
            # The shell (a `docker exec`: most of a first command's time) starts while the
            # client asks its model for the first command.
            session.warming = asyncio.create_task(self._warm_repl(session))
        metrics.CREATE_SECONDS.labels(source).observe(time.perf_counter() - started)
        metrics.SESSIONS_CREATED.inc()
        return SessionInfo(
            session_id, c.WORKSPACE, self.name, self.isolation(spec.network), self.replica_id
        )

    async def _container_for(
        self, spec: SessionSpec, image: str, resources: Resources, tarball: str
    ) -> tuple[str, str, str, bool]:
        """Session id, container id, source (pool/cold) and whether the repo is in it."""
        pooled, seeded = None, False
        if not spec.network and resources == self.config.defaults:
            pooled, seeded = self._take_pooled(image, tarball)
        if pooled is not None:
            self._label_job_later(pooled.container_id, pooled.session_id, spec.job_id)
            return pooled.session_id, pooled.container_id, "pool", seeded
        session_id = new_session_id(self.replica_id)
        req = ContainerRequest(session_id, image, resources, spec.network, spec.job_id)
        return session_id, await self._start(req), "cold", False

    async def check_images(self, images: Sequence[str]) -> ImageReport:
        missing = await self.engine.missing_images(sorted(set(images)))
        return ImageReport(missing, pull_allowed=self.config.pull, runs_images=True)

    def _label_job_later(self, container_id: str, session_id: str, job_id: str) -> None:
        # Labels are fixed at creation, and a pooled container was made before its job was
        # known: the container name carries the job instead (`docker ps` shows it).
        slug = _NAME_SAFE.sub("-", job_id)[:40].strip("-.") or "nojob"
        name = f"artfleet-{slug}-{session_id.split('.')[1][:12]}"

        async def rename() -> None:
            with contextlib.suppress(SandboxError):
                await self.engine.rename(container_id, name)

        task = asyncio.get_running_loop().create_task(rename())
        self._renames.add(task)
        task.add_done_callback(self._renames.discard)

    async def close_session(self, session_id: str) -> bool:
        session = self._sessions.pop(session_id)
        if session is None:
            return False
        await self._remove(session.container_id)
        if session.warming is not None:
            await session.warming  # ends with the container, if it was still starting
        if session.repl is not None:
            await session.repl.stop()
        return True

    async def close_all(self) -> int:
        results = await asyncio.gather(*(self.close_session(sid) for sid in self._sessions.ids()))
        return sum(results)

    # -- commands and files ------------------------------------------------------------

    async def _run(
        self,
        session: _Session,
        command: str,
        cwd: str,
        env: Mapping[str, str],
        stdin: bytes,
        limits: ReadLimits,
    ) -> ExecOutcome:
        check_command(command)
        check_env(env)
        rel = clean_relpath(cwd, allow_empty=True)
        workdir = f"{c.WORKSPACE}/{rel}" if rel else c.WORKSPACE
        with self._sessions.in_use(session):
            outcome = await self.engine.exec(
                ExecCall(
                    session.container_id,
                    _shell_argv(command),
                    self.config.user,
                    {**session.env, **env},
                    workdir,
                    stdin,
                    limits,
                )
            )
        if outcome.oom_killed:
            metrics.OOM_KILLS.inc()
        return outcome

    async def exec(self, session_id: str, spec: ExecSpec) -> ExecOutcome:
        if spec.timeout_s <= 0 or spec.max_output_bytes < 0:
            raise InvalidArgument("timeout_s must be positive and max_output_bytes not negative")
        session = self._sessions.get(session_id)
        if spec.use_repl(session.repl_default):
            return await self._repl_exec(session, spec)
        limits = ReadLimits(spec.timeout_s, spec.max_output_bytes, self.config.drain_limit_bytes)
        return await self._run(session, spec.command, spec.cwd, spec.env, spec.stdin, limits)

    # -- the session's REPL --------------------------------------------------------------

    def _repl_of(self, session: _Session) -> ReplShell:
        if session.repl is None:
            session.repl = ReplShell(
                lambda sink: self._spawn_repl(session, sink),
                lambda: self.engine.kill_user(session.container_id, self.config.user),
                self.name,
            )
        return session.repl

    async def _warm_repl(self, session: _Session) -> None:
        try:
            await self._repl_of(session).start()
        except Exception as exc:  # the first call starts it again and reports the error
            log.debug("session %s: shell not started at open: %s", session.id, exc)

    async def _spawn_repl(self, session: _Session, sink: ReplSink) -> DockerChannel:
        return await DockerChannel.start(
            self.engine, sink, session.container_id, self.config.user, session.env, c.WORKSPACE
        )

    async def _repl_exec(self, session: _Session, spec: ExecSpec) -> ExecOutcome:
        check_command(spec.command)
        check_env(spec.env)
        rel = clean_relpath(spec.cwd, allow_empty=True) if spec.cwd else ""
        call = ReplCall(
            spec.command,
            spec.timeout_s,
            spec.max_output_bytes,
            cwd=f"{c.WORKSPACE}/{rel}" if rel else "",
            env=dict(spec.env),
            stdin=spec.stdin,
            drain_limit_bytes=self.config.drain_limit_bytes,
        )
        with self._sessions.in_use(session):
            outcome = await self._repl_of(session).run(call)
            killed = may_be_oom(outcome.exit_code, outcome.stdout_truncated)
            if killed and await self.engine.oom_killed(session.container_id):
                metrics.OOM_KILLS.inc()
                outcome = replace(outcome, oom_killed=True)
        return outcome

    async def write_files(self, session_id: str, files: Sequence[FileSpec]) -> int:
        session = self._sessions.get(session_id)
        with self._sessions.in_use(session):
            await self.engine.put_files(session.container_id, files, self._uid)
        return len(files)

    async def read_file(self, session_id: str, path: str, max_bytes: int) -> tuple[bytes, bool]:
        if max_bytes < 0:
            raise InvalidArgument("max_bytes must not be negative")
        session = self._sessions.get(session_id)
        with self._sessions.in_use(session):
            return await self.engine.read_file(session.container_id, path, max_bytes)

    async def run_tests(self, session_id: str, command: str, timeout_s: float) -> RunTestsReport:
        if timeout_s <= 0:
            raise InvalidArgument("timeout_s must be positive")
        session = self._sessions.get(session_id)
        # /tmp is a tmpfs the engine's archive API cannot read: the report comes back
        # through `cat`, capped like any output.
        report = f"/tmp/.artfleet-junit-{secrets.token_hex(6)}.xml"
        text = (command or self.config.test_command).replace("{junitxml}", shlex.quote(report))
        cap = self.config.test_output_bytes
        limits = ReadLimits(
            timeout_s,
            cap // 4,
            self.config.drain_limit_bytes,
            tail_bytes=cap - cap // 4,
            merge=True,
        )
        result = await self._run(session, text, "", {}, b"", limits)
        fetch = ReadLimits(30.0, _MAX_JUNIT_BYTES, _MAX_JUNIT_BYTES + 1)
        junit = await self._run(
            session, f"cat {report} 2>/dev/null; rm -f {report}", "", {}, b"", fetch
        )
        tests = [] if junit.stdout_truncated else parse_junit(junit.stdout)
        return RunTestsReport(
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
            output=result.stdout.decode("utf-8", errors="replace"),
            tests=tests,
        )

    # -- stdio processes (McpStdio) ----------------------------------------------------

    async def open_stdio(self, spec: StdioSpec) -> StdioProcess:
        """`docker run -i IMAGE ARGS` in a session-like container (same limits and
        labels); closing the process removes the container."""
        held = len(self._sessions) + len(self._creating) + len(self._stdio)
        resources, image = await self._admit(spec, held)
        argv, workdir = await image_argv(self.engine, image, spec.args)
        if not argv:
            raise InvalidArgument(f"image {image!r} has no ENTRYPOINT or CMD: give args")
        stdio_id = new_session_id(self.replica_id)
        self._stdio.add(stdio_id)
        container_id = ""

        async def remove() -> None:
            if container_id:
                await self._remove(container_id)
            self._stdio.discard(stdio_id)

        try:
            req = ContainerRequest(stdio_id, image, resources, spec.network, spec.job_id)
            container_id = await self._start(req)
            env = {"HOME": c.WORKSPACE, **spec.env}
            return await DockerStdio.start(
                self.engine, container_id, argv, self.config.user, env, workdir, remove
            )
        except BaseException:
            await asyncio.shield(remove())
            raise

    # -- reaper ------------------------------------------------------------------------

    async def reap(self) -> int:
        """One pass: expired sessions of ours, then orphaned or stale containers."""
        now = time.monotonic()
        removed = 0
        for session in self._sessions.values():
            reason = None
            if now - session.created > self.config.max_lifetime_s:
                reason = "lifetime"  # even when busy: max lifetime is a hard bound
            elif session.busy == 0 and now - session.last_used > session.ttl_s:
                reason = "idle"
            if reason and await self.close_session(session.id):
                metrics.REAPED_SESSIONS.labels(reason).inc()
                log.info("reaped session %s (%s)", session.id, reason)
                removed += 1
        self._pool.expire()
        # Known before and after the listing: a session closed or created meanwhile is
        # in one of the two snapshots.
        tracked = self._tracked()
        containers = await self.engine.list_managed(self.config.deployment)
        owners = {
            owner: await self.engine.container_running(owner)
            for owner in owner_containers(containers, self.identity)
        }
        tracked |= self._tracked()
        for item in containers:
            reason = reap_reason(item, self.identity, tracked, owners)
            if reason and await self._remove(item.id):
                metrics.REAPED_SESSIONS.labels(reason).inc()
                log.info("removed %s container %s", reason, item.id[:12])
                removed += 1
        return removed

    def _tracked(self) -> set[str]:
        ids = set(self._sessions.ids()) | self._creating | self._pool.session_ids()
        return ids | self._stdio

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.reap_interval_s)
            try:
                await self.reap()
            except Exception:  # the engine may be down for a moment; try again next round
                log.exception("reaper pass failed")
