"""The docker backend's REPL channel: one `docker exec -i` (stdin attached, no TTY, so
stdout and stderr stay apart in the multiplexed stream) kept open for the session.

The exec is created on an engine thread once; after that the hijacked socket is read
and written on the event loop, so a call costs no engine round trip at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

from artfleet_sandbox.docker_backend.engine import DockerEngine, engine_errors
from artfleet_sandbox.docker_backend.execio import FrameDemux
from artfleet_sandbox.replshell import ReplSink

log = logging.getLogger(__name__)

_READ_CHUNK = 256 * 1024


class ExecSocket:
    """The attached socket of one `docker exec -i`, used on the event loop: its frames
    read until the stream ends, writes, half-close, the exec's exit code."""

    def __init__(self, engine: DockerEngine, exec_id: str, sock: Any) -> None:
        self._engine = engine
        self._exec_id = exec_id
        self._wrapper = sock  # keeps the SDK's wrapper, and so the connection, alive
        self._raw: socket.socket = getattr(sock, "_sock", sock)
        self._raw.setblocking(False)

    async def frames(self, chunk: int, what: str) -> AsyncIterator[tuple[int, bytes]]:
        """(stream, payload) frames until the stream ends (EOF or a socket error)."""
        loop = asyncio.get_running_loop()
        demux = FrameDemux()
        try:
            while True:
                data = await loop.sock_recv(self._raw, chunk)
                if not data:
                    return
                for frame in demux.feed(data):
                    yield frame
        except OSError as exc:
            log.debug("%s stream ended: %s", what, exc)

    async def send(self, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self._raw, data)

    def shutdown_write(self) -> None:
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._raw.close()

    async def exit_code(self) -> int | None:
        def inspect() -> int | None:
            info = self._engine.client.api.exec_inspect(self._exec_id)
            return None if info.get("Running") else info.get("ExitCode")

        for _ in range(50):  # the engine notes the exit a moment after the stream ends
            with contextlib.suppress(Exception):
                code = await self._engine.call(inspect)
                if code is not None:
                    return int(code)
            await asyncio.sleep(0.1)
        return None


class ExecChannel:
    """One exec socket and the task that reads its frames (`_read`, from the start on);
    closing cancels the read, then closes the socket."""

    def __init__(self, exec_socket: ExecSocket, reader_name: str) -> None:
        self._socket = exec_socket
        self._reader = asyncio.get_running_loop().create_task(self._read(), name=reader_name)

    async def _read(self) -> None:
        raise NotImplementedError

    async def send(self, data: bytes) -> None:
        await self._socket.send(data)

    async def _stop_reading(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        self._socket.close()


class DockerChannel(ExecChannel):
    """The session shell's channel: its frames go to the REPL's sink."""

    def __init__(self, exec_socket: ExecSocket, sink: ReplSink) -> None:
        self._sink = sink
        super().__init__(exec_socket, "repl-read")

    async def _read(self) -> None:
        try:
            async for stream, payload in self._socket.frames(_READ_CHUNK, "session shell"):
                self._sink.data(stream, payload)
        finally:
            self._sink.eof()

    async def close(self) -> None:
        await self._stop_reading()

    async def exit_status(self) -> int | None:
        return await self._socket.exit_code()


async def start_exec_socket(
    engine: DockerEngine,
    container_id: str,
    argv: list[str],
    user: str,
    env: dict[str, str],
    workdir: str,
    what: str,
) -> ExecSocket:
    """A `docker exec -i` of `argv`, started, with its attached socket."""

    def create() -> tuple[str, Any]:
        api = engine.client.api
        exec_id = api.exec_create(
            container_id, argv, stdin=True, environment=env, workdir=workdir, user=user
        )["Id"]
        return exec_id, api.exec_start(exec_id, socket=True)

    with engine_errors(what):
        exec_id, sock = await engine.call(create)
    return ExecSocket(engine, exec_id, sock)
