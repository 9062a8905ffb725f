"""DockerBackend: sessions as containers, owned by this replica and removed on close."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from artfleet_sandbox import metrics
from artfleet_sandbox.backend import (
    CaseResult,
    ExecOutcome,
    FileSpec,
    ImageReport,
    InvalidArgument,
    Resources,
    SessionInfo,
    SessionSpec,
)
from artfleet_sandbox.docker_backend import config as c
from artfleet_sandbox.docker_backend.containers import Containers
from artfleet_sandbox.docker_backend.engine import DockerEngine, ExecCall, may_be_oom
from artfleet_sandbox.docker_backend.execio import ReadLimits
from artfleet_sandbox.docker_backend.pool import Pooled, WarmPool
from artfleet_sandbox.docker_backend.reaper import owner_containers, reap_reason
from artfleet_sandbox.docker_backend.replio import DockerChannel, start_exec_socket
from artfleet_sandbox.docker_backend.spec import (
    ContainerRequest,
    check_network,
    effective_resources,
)
from artfleet_sandbox.docker_backend.stdio import DockerStdio, image_argv
from artfleet_sandbox.junit import parse_junit
from artfleet_sandbox.paths import clean_relpath
from artfleet_sandbox.pyruntime import default_cache_dir
from artfleet_sandbox.repl import docker_argv
from artfleet_sandbox.replica import ReplicaIdentity, new_session_id
from artfleet_sandbox.replshell import ReplSink
from artfleet_sandbox.repocache import RepoCache
from artfleet_sandbox.session_base import BaseSession, RunCall, SessionBackend
from artfleet_sandbox.stdio import StdioProcess, StdioSpec

log = logging.getLogger(__name__)

# bash when the image has it (the proto's promise), plain sh otherwise.
_SHELL = 'if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; else exec sh -c "$1"; fi'
_MAX_JUNIT_BYTES = 32 * 1024 * 1024


def _shell_argv(command: str) -> list[str]:
    return ["/bin/sh", "-c", _SHELL, "sh", command]


@dataclass(kw_only=True)
class _Session(BaseSession):
    container_id: str


class DockerBackend(SessionBackend[_Session]):
    name = "docker"
    config: c.DockerConfig

    def __init__(self, config: c.DockerConfig | None = None) -> None:
        self.config = config or c.DockerConfig()
        self.identity = ReplicaIdentity.current(self.config.replica_id)
        super().__init__(self.identity.replica_id, self.config.drain_limit_bytes)
        self.engine = DockerEngine(self.config.docker_host, self.config.threads)
        self._uid = int(self.config.user.split(":")[0])
        self.repos = RepoCache(self.config.cache_dir or default_cache_dir(), self._uid)
        self._containers = Containers(self.engine, self.config, self.identity, self._uid)
        self._stdio: set[str] = set()  # ids of containers running an McpStdio process
        self._pool = WarmPool(
            self.config.pool_size,
            self.config.pool_max_age_s,
            self._create_pooled,
            self._containers.remove,
            max_images=self.config.pool_max_images,
            keep=(self.config.default_image, *self.config.pool_images),
        )
        # Warm-pool keys of repo-seeded pools -> (image, the repo's tarball).
        self._seeded: dict[str, tuple[str, str]] = {}

    @property
    def replica_id(self) -> str:
        return self.identity.replica_id

    def isolation(self, network: bool) -> str:
        net = "network" if network else "no network"
        return f"docker container ({net}, read-only root, non-root {self.config.user})"

    # -- lifecycle ---------------------------------------------------------------------

    async def _prepare(self) -> None:
        await self.engine.connect()
        removed = await self.reap()
        for image in dict.fromkeys([*self.config.pool_images]):
            await self.engine.ensure_image(image, self.config.pull)
            self._pool.refill(image)
        log.info(
            "docker sandbox backend up: replica %s, deployment %r, %d leftover containers removed",
            self.replica_id,
            self.config.deployment,
            removed,
        )

    async def _shutdown(self) -> None:
        await self._within_stop_timeout(self._remove_own(), "removing this replica's containers")
        await self.engine.close()

    async def _remove_own(self) -> None:
        pooled = await self._pool.stop()
        await self._containers.settle()
        await self.close_all()
        await asyncio.gather(*(self._containers.remove(cid) for cid in pooled))
        # Whatever else carries our replica id (a create cut short by the shutdown).
        leftovers = [
            item.id
            for item in await self.engine.list_managed(self.config.deployment)
            if item.labels.get(c.LABEL_REPLICA) == self.replica_id
        ]
        await asyncio.gather(*(self._containers.remove(cid) for cid in leftovers))

    # -- containers --------------------------------------------------------------------

    async def _create_pooled(self, key: str) -> Pooled:
        image, tarball = self._seeded.get(key, (key, ""))
        session_id = new_session_id(self.replica_id)
        req = ContainerRequest(session_id, image, self.config.defaults, False, pooled=True)
        # `start` tracks the id until it returns; the pool holds it from then on.
        container_id = await self._containers.start(req)
        if tarball:
            with self._containers.on_its_way(session_id):
                try:
                    await self.engine.put_tarball(container_id, tarball)
                except BaseException:
                    await asyncio.shield(self._containers.remove(container_id))
                    raise
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

    # -- sessions ----------------------------------------------------------------------

    async def _admit_spec(self, spec: SessionSpec | StdioSpec, held: int) -> tuple[Resources, str]:
        """What a new session or stdio container gets, once it may have one: `held`
        counts against max_sessions; env and network are checked; the image is there."""
        self._admit(held, spec.env)
        check_network(spec.network, self.config)
        resources = effective_resources(spec.resources, self.config.defaults, self.config.caps)
        image = spec.image or self.config.default_image
        await self.engine.ensure_image(image, self.config.pull)
        return resources, image

    async def create_session(self, spec: SessionSpec) -> SessionInfo:
        held = len(self._sessions) + len(self._containers.creating)
        resources, image = await self._admit_spec(spec, held)
        ttl_s = self._idle_ttl(spec.idle_ttl_s)
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
            ttl_s=ttl_s,
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
        self._start_warming(session)
        return self._opened(session, source, started, c.WORKSPACE, self.isolation(spec.network))

    async def _container_for(
        self, spec: SessionSpec, image: str, resources: Resources, tarball: str
    ) -> tuple[str, str, str, bool]:
        """Session id, container id, source (pool/cold) and whether the repo is in it."""
        pooled, seeded = None, False
        if not spec.network and resources == self.config.defaults:
            pooled, seeded = self._take_pooled(image, tarball)
        if pooled is not None:
            self._containers.name_for_job(pooled.container_id, pooled.session_id, spec.job_id)
            return pooled.session_id, pooled.container_id, "pool", seeded
        session_id = new_session_id(self.replica_id)
        req = ContainerRequest(session_id, image, resources, spec.network, spec.job_id)
        return session_id, await self._containers.start(req), "cold", False

    async def check_images(self, images: Sequence[str]) -> ImageReport:
        missing = await self.engine.missing_images(sorted(set(images)))
        return ImageReport(missing, pull_allowed=self.config.pull, runs_images=True)

    async def _end_processes(self, session: _Session) -> None:
        await self._containers.remove(session.container_id)  # a shell still starting ends with it

    # -- commands, files and the REPL --------------------------------------------------

    async def _run_command(self, session: _Session, call: RunCall) -> ExecOutcome:
        rel = clean_relpath(call.cwd, allow_empty=True)
        drain = self.config.drain_limit_bytes
        limits = ReadLimits(
            call.timeout_s, call.max_output_bytes, drain, call.tail_bytes, call.merge
        )
        return await self.engine.exec(
            ExecCall(
                session.container_id,
                _shell_argv(call.command),
                self.config.user,
                {**session.env, **call.env},
                f"{c.WORKSPACE}/{rel}" if rel else c.WORKSPACE,
                call.stdin,
                limits,
            )
        )

    async def _repl_cwd(self, session: _Session, cwd: str) -> str:
        rel = clean_relpath(cwd, allow_empty=True)
        return f"{c.WORKSPACE}/{rel}" if rel else ""

    async def _spawn_repl(self, session: _Session, sink: ReplSink) -> DockerChannel:
        exec_socket = await start_exec_socket(
            self.engine,
            session.container_id,
            docker_argv(),
            self.config.user,
            session.env,
            c.WORKSPACE,
            "start the session's shell",
        )
        return DockerChannel(exec_socket, sink)

    async def _kill_repl(self, session: _Session) -> None:
        await self.engine.kill_user(session.container_id, self.config.user)

    async def _after_repl(self, session: _Session, outcome: ExecOutcome) -> ExecOutcome:
        killed = may_be_oom(outcome.exit_code, outcome.stdout_truncated)
        if killed and await self.engine.oom_killed(session.container_id):
            return replace(outcome, oom_killed=True)
        return outcome

    async def _put_files(self, session: _Session, files: Sequence[FileSpec]) -> None:
        await self.engine.put_files(session.container_id, files, self._uid)

    async def _read(self, session: _Session, path: str, max_bytes: int) -> tuple[bytes, bool]:
        return await self.engine.read_file(session.container_id, path, max_bytes)

    def _report_path(self, session: _Session) -> str:
        return f"/tmp/.artfleet-junit-{secrets.token_hex(6)}.xml"

    async def _fetch_report(self, session: _Session, report: str) -> list[CaseResult]:
        # /tmp is a tmpfs the engine's archive API cannot read: the report comes back
        # through `cat`, capped like any output.
        fetch = ReadLimits(30.0, _MAX_JUNIT_BYTES, _MAX_JUNIT_BYTES + 1)
        argv = _shell_argv(f"cat {report} 2>/dev/null; rm -f {report}")
        user, env = self.config.user, dict(session.env)
        call = ExecCall(session.container_id, argv, user, env, c.WORKSPACE, b"", fetch)
        junit = await self.engine.exec(call)
        return [] if junit.stdout_truncated else parse_junit(junit.stdout)

    # -- stdio processes (McpStdio) ----------------------------------------------------

    async def open_stdio(self, spec: StdioSpec) -> StdioProcess:
        """`docker run -i IMAGE ARGS` in a session-like container (same limits and
        labels); closing the process removes the container."""
        held = len(self._sessions) + len(self._containers.creating) + len(self._stdio)
        resources, image = await self._admit_spec(spec, held)
        argv, workdir = await image_argv(self.engine, image, spec.args)
        if not argv:
            raise InvalidArgument(f"image {image!r} has no ENTRYPOINT or CMD: give args")
        stdio_id = new_session_id(self.replica_id)
        self._stdio.add(stdio_id)
        container_id = ""

        async def remove() -> None:
            if container_id:
                await self._containers.remove(container_id)
            self._stdio.discard(stdio_id)

        try:
            req = ContainerRequest(stdio_id, image, resources, spec.network, spec.job_id)
            container_id = await self._containers.start(req)
            env = {"HOME": c.WORKSPACE, **spec.env}
            exec_socket = await start_exec_socket(
                self.engine,
                container_id,
                argv,
                self.config.user,
                env,
                workdir,
                "start the MCP server process",
            )
            return DockerStdio(exec_socket, remove)
        except BaseException:
            await asyncio.shield(remove())
            raise

    # -- reaper ------------------------------------------------------------------------

    async def reap(self) -> int:
        """One pass: expired sessions of ours, then orphaned or stale containers."""
        removed = await self._reap_sessions(self.config.max_lifetime_s)
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
            if reason and await self._containers.remove(item.id):
                metrics.REAPED_SESSIONS.labels(reason).inc()
                log.info("removed %s container %s", reason, item.id[:12])
                removed += 1
        return removed

    def _tracked(self) -> set[str]:
        ids = set(self._sessions.ids()) | self._containers.creating | self._pool.session_ids()
        return ids | self._stdio
