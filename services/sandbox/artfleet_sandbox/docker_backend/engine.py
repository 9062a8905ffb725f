"""The Docker engine, through the `docker` SDK: blocking calls on a dedicated thread pool.

This is the one I/O boundary of the backend. Engine errors become the backend's own:
a vanished container is `Unavailable` (its session cannot go on), a bad image or path
is `InvalidArgument`, anything else is a `SandboxError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import docker
import docker.errors
import requests

from artfleet_sandbox.backend import (
    ExecOutcome,
    FileSpec,
    ImageMissing,
    InvalidArgument,
    PathNotFound,
    SandboxError,
    Unavailable,
)
from artfleet_sandbox.docker_backend import config as c
from artfleet_sandbox.docker_backend.archive import files_tar, first_file
from artfleet_sandbox.docker_backend.execio import ReadLimits, read_exec_stream
from artfleet_sandbox.paths import clean_relpath

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_OOM_PROBE = "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control"
_SIGKILL_EXIT = 137


def may_be_oom(exit_code: int, output_limit_hit: bool) -> bool:
    """A SIGKILL our own output cap did not cause: the OOM killer's (the container's
    oom_kill counter tells) or one the command sent itself."""
    return exit_code == _SIGKILL_EXIT and not output_limit_hit


@dataclass(frozen=True)
class ManagedContainer:
    id: str
    labels: dict[str, str]
    status: str  # created | running | exited | ...


@dataclass(frozen=True)
class ExecCall:
    """One command to run in a container, as the engine's exec API takes it."""

    container_id: str
    argv: Sequence[str]
    user: str
    env: dict[str, str]
    workdir: str
    stdin: bytes
    limits: ReadLimits


@contextlib.contextmanager
def engine_errors(what: str) -> Iterator[None]:
    try:
        yield
    except docker.errors.NotFound as exc:
        raise Unavailable(f"{what}: the session's container is gone ({exc.explanation})") from exc
    except docker.errors.APIError as exc:
        text = str(exc.explanation or exc)
        if exc.status_code == 409 and "not running" in text:
            raise Unavailable(f"{what}: the session's container stopped") from exc
        raise SandboxError(f"{what}: docker engine error: {text}") from exc
    except (requests.ConnectionError, docker.errors.DockerException) as exc:
        raise Unavailable(f"{what}: docker engine unreachable: {exc}") from exc


def parse_oom_kills(text: str) -> int:
    """The `oom_kill` counter from cgroup v2 memory.events or v1 memory.oom_control."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


class DockerEngine:
    def __init__(self, docker_host: str, threads: int) -> None:
        self._docker_host = docker_host
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="docker")
        self._threads = threads
        self._client: docker.DockerClient | None = None
        self._images: set[str] = set()

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            raise SandboxError("docker engine not connected")
        return self._client

    async def call(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def connect(self) -> None:
        def connect() -> docker.DockerClient:
            # One pooled HTTP connection per worker thread; the default 10 would make
            # concurrent sessions queue behind each other.
            kwargs: dict[str, Any] = {"max_pool_size": self._threads, "timeout": 120}
            if self._docker_host:
                client = docker.DockerClient(base_url=self._docker_host, **kwargs)
            else:
                client = docker.from_env(**kwargs)
            client.ping()
            return client

        with engine_errors("connect"):
            self._client = await self.call(connect)

    async def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- images and containers -------------------------------------------------------

    async def ensure_image(self, image: str, pull: bool) -> None:
        if image in self._images:
            return

        def ensure() -> None:
            try:
                self.client.images.get(image)
            except docker.errors.ImageNotFound:
                if not pull:
                    raise ImageMissing(
                        f"image {image!r} is not on the sandbox's Docker engine "
                        "(build or load it there; this deployment does not pull)"
                    ) from None
                log.info("pulling %s", image)
                self.client.images.pull(image)

        with engine_errors(f"image {image}"):
            await self.call(ensure)
        self._images.add(image)

    async def missing_images(self, images: Sequence[str]) -> list[str]:
        """Those of `images` the engine does not have: one listing, then a lookup only
        for names the listing does not spell the same way (`foo` vs `foo:latest`)."""

        def missing() -> list[str]:
            known: set[str] = set()
            for row in self.client.api.images():
                known.update(row.get("RepoTags") or ())
                known.update(row.get("RepoDigests") or ())
            absent = []
            for image in images:
                if image in known or image in self._images:
                    continue
                try:
                    self.client.images.get(image)
                except docker.errors.ImageNotFound:
                    absent.append(image)
                except docker.errors.APIError:  # an invalid reference is missing too
                    absent.append(image)
            return absent

        with engine_errors("list images"):
            return await self.call(missing)

    async def start_container(self, options: dict[str, Any], uid: int) -> str:
        """Create and start a container; make its workspace writable by `uid`."""

        def create() -> str:
            container = self.client.containers.create(**options)
            try:
                container.start()
                # A fresh anonymous volume copies the image's /workspace, owner included.
                # Images without one get a root-owned dir; root (no capabilities, but the
                # owner) may still open it up to the session's user.
                fix = f'[ "$(stat -c %u {c.WORKSPACE})" = {uid} ] || chmod 1777 {c.WORKSPACE}'
                code, output = self._run_short(str(container.id), fix, user="0:0")
                if code != 0:
                    raise SandboxError(f"workspace setup failed: {output[-500:]!r}")
            except BaseException:
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True, v=True)
                raise
            return str(container.id)

        with engine_errors("create session container"):
            return await self.call(create)

    async def remove(self, container_id: str) -> bool:
        def remove() -> bool:
            try:
                self.client.api.remove_container(container_id, v=True, force=True)
            except docker.errors.NotFound:
                return False
            except docker.errors.APIError as exc:
                # A removal already in progress, or the engine still busy with the container
                # (a start or kill of its own): the reaper's next pass tries it again.
                if exc.status_code == 409:
                    log.info("container %s not removed now: %s", container_id[:12], exc.explanation)
                    return False
                raise
            return True

        with engine_errors("remove container"):
            return await self.call(remove)

    async def rename(self, container_id: str, name: str) -> None:
        with engine_errors("rename container"):
            await self.call(self.client.api.rename, container_id, name)

    async def list_managed(self, deployment: str) -> list[ManagedContainer]:
        filters = {"label": [f"{c.LABEL_MANAGED}=sandbox", f"{c.LABEL_DEPLOYMENT}={deployment}"]}

        def listing() -> list[ManagedContainer]:
            rows = self.client.api.containers(all=True, filters=filters)
            return [ManagedContainer(r["Id"], r.get("Labels") or {}, r["State"]) for r in rows]

        with engine_errors("list containers"):
            return await self.call(listing)

    async def container_running(self, container_id: str) -> bool:
        def state() -> bool:
            try:
                info = self.client.api.inspect_container(container_id)
            except docker.errors.NotFound:
                return False
            return bool(info["State"]["Running"])

        with engine_errors("inspect container"):
            return await self.call(state)

    # -- commands ----------------------------------------------------------------------

    def _exec_blocking(self, call: ExecCall) -> ExecOutcome:
        api = self.client.api
        exec_id = api.exec_create(
            call.container_id,
            list(call.argv),
            stdin=bool(call.stdin),
            environment=call.env,
            workdir=call.workdir,
            user=call.user,
        )["Id"]
        sock = api.exec_start(exec_id, socket=True)
        limits = call.limits
        result = read_exec_stream(
            sock, call.stdin, limits, kill=lambda: self._kill_user(call.container_id, call.user)
        )
        exit_code = api.exec_inspect(exec_id).get("ExitCode")
        if result.timed_out or exit_code is None:
            exit_code = -1
        oom = may_be_oom(int(exit_code), result.output_limit_hit)
        return ExecOutcome(
            exit_code=int(exit_code),
            stdout=result.stdout.value(),
            stderr=b"" if limits.merge else result.stderr.value(),
            timed_out=result.timed_out,
            stdout_truncated=result.stdout.truncated or result.output_limit_hit,
            stderr_truncated=(not limits.merge) and result.stderr.truncated,
            duration_s=result.duration_s,
            oom_killed=oom and self._oom_kills(call.container_id) > 0,
        )

    def _run_short(self, container_id: str, script: str, user: str) -> tuple[int, bytes]:
        """A short shell script of ours in the container: exit code and its output."""
        api = self.client.api
        exec_id = api.exec_create(container_id, ["/bin/sh", "-c", script], user=user)["Id"]
        output = api.exec_start(exec_id)
        code = api.exec_inspect(exec_id).get("ExitCode")
        return (-1 if code is None else int(code)), output

    def _kill_user(self, container_id: str, user: str) -> None:
        # `kill -9 -1` as the command's user: every process that user runs in the
        # container, setsid escapees and fork bombs included, in one syscall. The init
        # runs as another uid and survives, and so does the session.
        try:
            self._run_short(container_id, "kill -9 -1", user)
        except docker.errors.APIError as exc:
            log.warning("could not kill the command in %s: %s", container_id[:12], exc)

    def _oom_kills(self, container_id: str) -> int:
        try:
            _, output = self._run_short(container_id, _OOM_PROBE + " 2>/dev/null", "0:0")
        except docker.errors.APIError:
            return 0
        return parse_oom_kills(output.decode(errors="replace"))

    async def kill_user(self, container_id: str, user: str) -> None:
        """Everything `user` runs in the container (the session's REPL shell included)."""
        with engine_errors("kill"):
            await self.call(self._kill_user, container_id, user)

    async def oom_killed(self, container_id: str) -> bool:
        with engine_errors("OOM probe"):
            return await self.call(self._oom_kills, container_id) > 0

    async def exec(self, call: ExecCall) -> ExecOutcome:
        with engine_errors("exec"):
            return await self.call(self._exec_blocking, call)

    # -- files ---------------------------------------------------------------------------

    async def put_tarball(self, container_id: str, path: str) -> None:
        """Unpacks a prepared tar (repocache) into the workspace in one engine call."""

        def put() -> None:
            with open(path, "rb") as data:
                if not self.client.api.put_archive(container_id, c.WORKSPACE, data):
                    raise SandboxError("the engine refused the repository")

        with engine_errors("seed the repository"):
            await self.call(put)

    async def put_files(self, container_id: str, files: Sequence[FileSpec], uid: int) -> None:
        if not files:
            return
        data = files_tar(files, uid, uid)

        def put() -> None:
            if not self.client.api.put_archive(container_id, c.WORKSPACE, data):
                raise SandboxError("the engine refused the files")

        try:
            with engine_errors("write files"):
                await self.call(put)
        except SandboxError as exc:
            if "read-only" in str(exc) or "not a directory" in str(exc):
                raise InvalidArgument(f"cannot write there: {exc}") from exc
            raise

    async def read_file(self, container_id: str, path: str, max_bytes: int) -> tuple[bytes, bool]:
        rel = clean_relpath(path)

        def read() -> tuple[bytes, bool]:
            try:
                chunks, _ = self.client.api.get_archive(container_id, f"{c.WORKSPACE}/{rel}")
            except docker.errors.NotFound as exc:
                if "No such container" in str(exc.explanation):
                    raise
                raise PathNotFound(f"no file {path!r} in the workspace") from None
            try:
                return first_file(chunks, path, max_bytes)
            finally:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()

        with engine_errors("read file"):
            return await self.call(read)
