"""One session's REPL: a long-lived shell behind a byte channel, one call at a time.

Backends supply the channel (a local subprocess's pipes, a `docker exec -i` socket) and
a `kill` that ends everything the shell started; this class does the rest: frames the
call, waits for both sentinels, enforces the timeout and the output caps, and restarts
the shell after it dies. Pure protocol details live in `repl.py`.

Fault policy, the same on every backend: a timeout or an output flood kills everything
the session's shell started and the shell with it (`kill -9 -1` as the session user,
or the local backend's tagged kill), because a fork bomb or a `setsid` escapee could not
be reached otherwise. The result then says `shell_restarted`: state is lost. A shell
that ends by itself (`exit`, `exec`, `kill -9 $$`, the OOM killer) is noticed at EOF.
The next call starts a fresh shell either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from artfleet_sandbox import metrics, repl
from artfleet_sandbox.backend import ExecOutcome
from artfleet_sandbox.procs import Capture

log = logging.getLogger(__name__)

STDOUT, STDERR = 1, 2
KILL_GRACE_S = 10.0  # after the kill, how long the shell may take to end its stream
_PENDING_CAP = 64 * 1024  # background output between calls kept for the next call
_KILLED_STATUS = 137  # what a shell reports for a command ended by SIGKILL


class ReplSink(Protocol):
    def data(self, stream: int, payload: bytes) -> None: ...

    def eof(self) -> None: ...


class ReplChannel(Protocol):
    """A running shell's stdin, and its stdout/stderr delivered to the sink it was made for."""

    async def send(self, data: bytes) -> None: ...

    async def close(self) -> None:
        """Release the transport (the shell may already be gone)."""

    async def exit_status(self) -> int | None:
        """After EOF: the shell's exit status, when known."""


Spawn = Callable[[ReplSink], Awaitable[ReplChannel]]
Kill = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class ReplCall:
    command: str
    timeout_s: float
    max_output_bytes: int
    cwd: str = ""  # absolute, in the shell's view; "" = stay where the shell is
    env: dict[str, str] | None = None
    stdin: bytes = b""
    drain_limit_bytes: int = 0  # kill past this much output in all; 0 = never


class _Call:
    """The call in flight: its scanners, captures, and the event that ends the wait."""

    def __init__(self, token: str, call: ReplCall) -> None:
        self.scan = {
            STDOUT: repl.SentinelScanner(token, with_status=True),
            STDERR: repl.SentinelScanner(token, with_status=False),
        }
        self.capture = {s: Capture(call.max_output_bytes) for s in (STDOUT, STDERR)}
        self.drain_limit = call.drain_limit_bytes
        self.settled = asyncio.Event()
        self.flooded = False
        self.eof = False

    def feed(self, stream: int, payload: bytes) -> None:
        self.capture[stream].feed(self.scan[stream].feed(payload))
        total = self.capture[STDOUT].total + self.capture[STDERR].total
        if self.drain_limit and total > self.drain_limit:
            self.flooded = True
            self.settled.set()
        elif all(s.done for s in self.scan.values()):
            self.settled.set()

    def end_of_stream(self) -> None:
        self.eof = True
        for stream, scanner in self.scan.items():
            self.capture[stream].feed(scanner.flush())
        self.settled.set()

    @property
    def complete(self) -> bool:
        return all(s.done for s in self.scan.values())


class ReplShell:
    """The session's shell; `run` serializes calls, `stop` ends it."""

    def __init__(self, spawn: Spawn, kill: Kill, backend: str) -> None:
        self._spawn = spawn
        self._kill = kill
        self._backend = backend
        self._channel: ReplChannel | None = None
        self._current: _Call | None = None
        self._pending = {STDOUT: bytearray(), STDERR: bytearray()}
        self._lost = False  # the shell died between calls: the next result says so
        self._lock = asyncio.Lock()
        self.commands = 0
        self.restarts = 0

    # -- the sink the channel feeds ----------------------------------------------------

    def data(self, stream: int, payload: bytes) -> None:
        current = self._current
        if current is not None and not current.scan[stream].done:
            current.feed(stream, payload)
            rest = current.scan[stream].rest
            if current.scan[stream].done and rest:
                current.scan[stream].rest = b""
                self._keep(stream, rest)
        else:
            self._keep(stream, payload)

    def _keep(self, stream: int, payload: bytes) -> None:
        buffer = self._pending[stream]
        buffer += payload[: max(0, _PENDING_CAP - len(buffer))]

    def eof(self) -> None:
        if self._current is not None:
            self._current.end_of_stream()
        elif self._channel is not None:
            self._lost = True  # died between calls: a background job killed it, or OOM

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._channel is not None and not self._lost

    async def stop(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()
        metrics.REPL_COMMANDS_PER_SESSION.observe(self.commands)

    async def start(self) -> None:
        """Starts the shell now rather than at the first call (which then finds it running
        or, while it is still starting, waits for it)."""
        async with self._lock:
            await self._ensure()

    async def _ensure(self) -> tuple[ReplChannel, bool]:
        restarted = self._lost
        if self._lost and self._channel is not None:
            await self._drop()
        if self._channel is None:
            self._channel = await self._spawn(self)
            for buffer in self._pending.values():
                buffer.clear()
        self._lost = False
        return self._channel, restarted

    async def _drop(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()
        self.restarts += 1
        metrics.REPL_RESTARTS.labels(self._backend).inc()

    # -- calls -------------------------------------------------------------------------

    async def run(self, call: ReplCall) -> ExecOutcome:
        async with self._lock:
            channel, restarted = await self._ensure()
            self.commands += 1
            token = repl.new_token()
            current = _Call(token, call)
            for stream, buffer in self._pending.items():
                current.capture[stream].feed(bytes(buffer))  # background output since
                buffer.clear()
            self._current = current
            started = time.monotonic()
            try:
                text = repl.script(call.command, call.cwd, call.env)
                await channel.send(repl.frame(token, text, call.stdin))
                return await self._finish(channel, current, call, started, restarted)
            except BaseException:
                # Cancelled (the client went away) or the channel broke: the shell's state
                # is unknown and its output would leak into the next call. Start over.
                if not current.eof:
                    await asyncio.shield(self._kill_and_wait(current))
                await self._drop()
                raise
            finally:
                self._current = None

    async def _finish(
        self,
        channel: ReplChannel,
        current: _Call,
        call: ReplCall,
        started: float,
        restarted: bool,
    ) -> ExecOutcome:
        timed_out = False
        try:
            await asyncio.wait_for(current.settled.wait(), call.timeout_s)
        except TimeoutError:
            timed_out = True
        status: int | None = current.scan[STDOUT].status
        died = False
        if timed_out or current.flooded:
            await self._kill_and_wait(current)
            status, died = (-1 if timed_out else _KILLED_STATUS), True
        elif not current.complete:  # EOF first: the shell itself ended
            died = True
            status = await channel.exit_status()
            status = -1 if status is None else status
        if died:
            await self._drop()
        out, err = current.capture[STDOUT], current.capture[STDERR]
        return ExecOutcome(
            exit_code=-1 if status is None else status,
            stdout=out.value(),
            stderr=err.value(),
            timed_out=timed_out,
            stdout_truncated=out.truncated or current.flooded,
            stderr_truncated=err.truncated,
            duration_s=time.monotonic() - started,
            shell_restarted=restarted or died,
            stateless=False,
        )

    async def _kill_and_wait(self, current: _Call) -> None:
        await self._kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._until_eof(current), KILL_GRACE_S)

    @staticmethod
    async def _until_eof(current: _Call) -> None:
        while not current.eof:
            current.settled.clear()
            if current.eof:
                return
            await current.settled.wait()
