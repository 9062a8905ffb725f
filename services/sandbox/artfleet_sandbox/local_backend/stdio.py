"""The local backend's `McpStdio`: a command on the sandbox's own host, piped.

No container, so no isolation beyond the sandbox process's own: a deployment runs local
MCP servers only when it says so (`ARTFLEET_ALLOW_LOCAL_STDIO=true`, for development and
tests); otherwise the RPC answers FAILED_PRECONDITION.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping

from artfleet_sandbox.backend import InvalidArgument, check_env
from artfleet_sandbox.stdio import FailedPrecondition, Output, StdioSpec, StreamName

_READ_CHUNK = 64 * 1024
_EXIT_POLL_S = 0.01
_EXIT_POLLS = 500  # 5 s for a SIGKILL to land


class LocalStdio:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.output: asyncio.Queue[Output] = asyncio.Queue(maxsize=64)
        self._process = process
        assert process.stdout is not None and process.stderr is not None
        self._readers = [
            asyncio.create_task(self._read(process.stdout, "stdout")),
            asyncio.create_task(self._read(process.stderr, "stderr")),
        ]
        self._ended = asyncio.create_task(self._end())

    @classmethod
    async def start(cls, spec: StdioSpec, allowed: bool, path: str) -> LocalStdio:
        if not allowed:
            raise FailedPrecondition(
                "this sandbox runs no local MCP servers (local backend; set "
                "ARTFLEET_ALLOW_LOCAL_STDIO=true to allow it, or use the docker backend)"
            )
        if not spec.args:
            raise InvalidArgument("args must name the command to run (local backend)")
        check_env(spec.env)
        env: Mapping[str, str] = {"PATH": path, "LANG": "C.UTF-8", **spec.env}
        try:
            process = await asyncio.create_subprocess_exec(
                *spec.args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(env),
                start_new_session=True,  # its own process group: close() kills them all
            )
        except OSError as exc:
            raise FailedPrecondition(f"cannot start {spec.args[0]!r}: {exc}") from exc
        return cls(process)

    async def _read(self, stream: asyncio.StreamReader, name: StreamName) -> None:
        while data := await stream.read(_READ_CHUNK):
            await self.output.put((name, data))

    async def _end(self) -> None:
        await asyncio.gather(*self._readers, return_exceptions=True)
        await self.output.put(None)

    async def send(self, data: bytes) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(data)
        await self._process.stdin.drain()

    async def close_stdin(self) -> None:
        assert self._process.stdin is not None
        with contextlib.suppress(OSError):
            self._process.stdin.close()

    async def exit_code(self) -> int | None:
        return await self._process.wait()

    async def close(self) -> None:
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
        for task in (*self._readers, self._ended):
            task.cancel()
        await asyncio.gather(*self._readers, self._ended, return_exceptions=True)
        # Output left unread in a pipe (a server killed mid-flood, its reader waiting for
        # room in `output`) keeps the pipe open, and wait() waits for its end: forever.
        # So the pipes are closed, once the kill landed (closing first would reap the
        # process behind the child watcher's back). Nothing public closes them (the MCP
        # SDK's stdio client does the same).
        for _ in range(_EXIT_POLLS):
            if self._process.returncode is not None:
                break
            await asyncio.sleep(_EXIT_POLL_S)
        transport = getattr(self._process, "_transport", None)
        if transport is not None:
            transport.close()
        await self._process.wait()
