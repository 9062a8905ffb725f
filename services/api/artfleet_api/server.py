"""The API's lifecycle object: uvicorn serving the app, started and stopped by us."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn

from artfleet.runtime.health import HealthMonitor
from artfleet_api.app import create_app
from artfleet_api.settings import ApiSettings


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers (it would re-raise SIGTERM at exit)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ApiServer:
    def __init__(self, settings: ApiSettings, grace_s: float = 10.0) -> None:
        config = uvicorn.Config(
            create_app(settings, settings.metrics_port),
            host=settings.host,
            port=settings.port,
            log_level=settings.log_level.lower(),
            timeout_graceful_shutdown=int(grace_s),  # SSE streams close when it runs out
        )
        self._server = _Server(config)
        self._task: asyncio.Task[None] | None = None
        # The trajectories it serves are the trainer's samples, kept on purpose.
        self.health = HealthMonitor.for_service(
            "api", settings, store_dirs=[settings.trajectories_dir]
        )

    async def start(self) -> None:
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start (port in use, ...)
                raise RuntimeError("the API server stopped before it started")
            await asyncio.sleep(0.05)
        self.health.start()

    @property
    def port(self) -> int:
        """The port it listens on (the one the system chose, for port 0); once started."""
        port: int = self._server.servers[0].sockets[0].getsockname()[1]
        return port

    async def stop(self) -> None:
        await self.health.stop()
        self._server.should_exit = True
        if self._task is not None:
            await self._task
