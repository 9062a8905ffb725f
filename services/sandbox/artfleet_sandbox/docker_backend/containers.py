"""The containers one docker backend replica creates and removes.

A create runs on an engine thread that cancelling its await does not stop: each one is
tracked until it returns (`creating` for the reaper, the task for shutdown), so that
`settle` can wait for it and shutdown then remove what it made.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Iterator

from artfleet_sandbox.backend import SandboxError
from artfleet_sandbox.docker_backend.config import DockerConfig
from artfleet_sandbox.docker_backend.engine import DockerEngine
from artfleet_sandbox.docker_backend.spec import ContainerRequest, container_options
from artfleet_sandbox.replica import ReplicaIdentity

log = logging.getLogger(__name__)

_NAME_SAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


def job_container_name(job_id: str, session_id: str) -> str:
    """The name that shows a pooled container's job in `docker ps`."""
    slug = _NAME_SAFE.sub("-", job_id)[:40].strip("-.") or "nojob"
    return f"artfleet-{slug}-{session_id.split('.')[1][:12]}"


class Containers:
    def __init__(
        self, engine: DockerEngine, config: DockerConfig, identity: ReplicaIdentity, uid: int
    ) -> None:
        self.engine = engine
        self.config = config
        self.identity = identity
        self.uid = uid
        self.creating: set[str] = set()  # session ids whose container is on its way
        self._inflight: set[asyncio.Future[str]] = set()
        self._renames: set[asyncio.Task[None]] = set()

    @contextlib.contextmanager
    def on_its_way(self, session_id: str) -> Iterator[None]:
        """The session's container counts as being made (the reaper leaves it alone)."""
        self.creating.add(session_id)
        try:
            yield
        finally:
            self.creating.discard(session_id)

    async def start(self, req: ContainerRequest) -> str:
        with self.on_its_way(req.session_id):
            options = container_options(req, self.config, self.identity)
            # Cancelling the await does not stop the engine thread: keep the task, so
            # `settle` can wait for it and shutdown then remove what it made.
            task = asyncio.ensure_future(self.engine.start_container(options, self.uid))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
            return await asyncio.shield(task)

    async def remove(self, container_id: str) -> bool:
        """Removes the container; False (and a warning) when the engine would not."""
        try:
            return await self.engine.remove(container_id)
        except SandboxError as exc:
            log.warning("could not remove container %s: %s", container_id[:12], exc)
            return False

    def name_for_job(self, container_id: str, session_id: str, job_id: str) -> None:
        """Labels are fixed at creation, and a pooled container was made before its job
        was known: its name carries the job instead, renamed in the background."""
        name = job_container_name(job_id, session_id)

        async def rename() -> None:
            with contextlib.suppress(SandboxError):
                await self.engine.rename(container_id, name)

        task = asyncio.get_running_loop().create_task(rename())
        self._renames.add(task)
        task.add_done_callback(self._renames.discard)

    async def settle(self) -> None:
        """Waits for the renames and creates still running on engine threads."""
        if self._renames:
            await asyncio.wait(self._renames)
        if self._inflight:
            await asyncio.wait(self._inflight)
