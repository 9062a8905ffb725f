"""`docker run -i IMAGE ARGS` the sandbox's way: the process an MCP server runs as.

The container is a session container like any other (`container_options`: the same
limits, read-only root, no capabilities, non-root user, labels), so the reaper and
cleanup-by-label treat it the same. Its idle main process waits; the server itself is
one `docker exec -i` of what `docker run` would have run: the image's ENTRYPOINT, then
ARGS or else its CMD, in its WORKDIR. No TTY, so stdout and stderr stay apart in the
multiplexed stream, which is read and written on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from artfleet_sandbox.docker_backend import config as c
from artfleet_sandbox.docker_backend.engine import DockerEngine, engine_errors
from artfleet_sandbox.docker_backend.replio import ExecChannel, ExecSocket
from artfleet_sandbox.stdio import Output, StreamName

log = logging.getLogger(__name__)

_READ_CHUNK = 64 * 1024
_STREAMS: dict[int, StreamName] = {1: "stdout", 2: "stderr"}


async def image_argv(
    engine: DockerEngine, image: str, args: Sequence[str]
) -> tuple[list[str], str]:
    """What `docker run IMAGE ARGS` runs, and where: (argv, workdir)."""

    def inspect() -> dict[str, Any]:
        return dict(engine.client.api.inspect_image(image).get("Config") or {})

    with engine_errors(f"inspect image {image}"):
        config = await engine.call(inspect)
    argv = [*(config.get("Entrypoint") or []), *(args or config.get("Cmd") or [])]
    return [str(a) for a in argv], str(config.get("WorkingDir") or c.WORKSPACE)


class DockerStdio(ExecChannel):
    """One `docker exec -i` whose stdio is piped; `close` also removes its container."""

    def __init__(self, exec_socket: ExecSocket, remove: Callable[[], Awaitable[None]]) -> None:
        self.output: asyncio.Queue[Output] = asyncio.Queue(maxsize=64)
        self._remove = remove
        self._closed = False
        super().__init__(exec_socket, "stdio-read")

    async def _read(self) -> None:
        try:
            async for stream, payload in self._socket.frames(_READ_CHUNK, "stdio"):
                # A full queue blocks this read: the process waits on its pipe, as with
                # `docker run -i` and a slow reader.
                await self.output.put((_STREAMS.get(stream, "stdout"), payload))
        finally:
            if not self._closed:  # close() cancels the read: nobody listens any more
                await self.output.put(None)

    async def close_stdin(self) -> None:
        self._socket.shutdown_write()

    async def exit_code(self) -> int | None:
        return await self._socket.exit_code()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._stop_reading()
        await self._remove()
