"""The local backend's REPL channel: a long-lived bash subprocess (inside bubblewrap when
the backend uses it) with stdin, stdout and stderr on pipes."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Mapping, Sequence

from artfleet_sandbox.procs import kill_group
from artfleet_sandbox.replshell import STDERR, STDOUT, ReplSink


class _Pipes(asyncio.SubprocessProtocol):
    def __init__(self, sink: ReplSink) -> None:
        self._sink = sink
        self._open = {STDOUT, STDERR}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd in (STDOUT, STDERR):
            self._sink.data(fd, data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        # Both output pipes closed: the shell ended. Background jobs that keep a pipe
        # open are killed with the shell (the tagged kill, or bubblewrap's pid namespace).
        if fd in self._open:
            self._open.discard(fd)
            if not self._open:
                self._sink.eof()


class LocalChannel:
    def __init__(self, transport: asyncio.SubprocessTransport) -> None:
        self._transport = transport
        self.pid = transport.get_pid()

    @classmethod
    async def start(
        cls, sink: ReplSink, argv: Sequence[str], cwd: str, env: Mapping[str, str]
    ) -> LocalChannel:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.subprocess_exec(
            lambda: _Pipes(sink),
            *argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,  # its own group: killpg reaches what it runs in front
        )
        return cls(transport)

    async def send(self, data: bytes) -> None:
        writer = self._transport.get_pipe_transport(0)
        assert isinstance(writer, asyncio.WriteTransport)
        writer.write(data)  # buffered by the loop; the driver reads it line by line

    async def close(self) -> None:
        if self._transport.get_returncode() is None:
            kill_group(self.pid)
        self._transport.close()

    async def exit_status(self) -> int | None:
        # The pipes close just before the process is reaped: give the loop a moment.
        for _ in range(250):
            code = self._transport.get_returncode()
            if code is not None:
                return 128 - code if code < 0 else code
            await asyncio.sleep(0.02)
        return None
