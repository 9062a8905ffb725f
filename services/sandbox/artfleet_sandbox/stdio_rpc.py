"""`Sandbox.McpStdio`: a backend's stdio process piped over a bidirectional gRPC stream.

The first client message is `start`; the process is started within the startup timeout,
then stdin flows in as `data` and stdout/stderr flow out as `data`/`stderr`. It ends:
- the client finished sending (or sent `close_stdin`) and the process exited: a last
  `exit` message, then OK;
- the process exited while the client still talks: ABORTED, with its exit code and the
  tail of its stderr (a crashed MCP server);
- no byte either way for the idle timeout: DEADLINE_EXCEEDED (a hung server, or an
  abandoned stream);
- the client went away: the handler is cancelled.
In every case the process is killed and its container removed before the RPC returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from artfleet.contracts.errors import ArtfleetError
from artfleet.v1 import sandbox_pb2 as pb
from artfleet_sandbox import metrics
from artfleet_sandbox.backend import ImageMissing, InvalidArgument, Resources, SandboxError
from artfleet_sandbox.stdio import FailedPrecondition, StdioBackend, StdioProcess, StdioSpec

log = logging.getLogger(__name__)

DEFAULT_STARTUP_S = 60.0
MAX_STARTUP_S = 600.0
DEFAULT_IDLE_S = 300.0
MAX_IDLE_S = 3600.0
_FIRST_MESSAGE_S = 30.0
_STDERR_TAIL = 2000


def _timeout(value: float, default: float, cap: float, name: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"start.{name} must be a non-negative number (0 = default)")
    return min(value or default, cap)


def stdio_spec(start: pb.StdioStart) -> tuple[StdioSpec, float, float]:
    """The backend's spec, the startup timeout and the idle timeout of a `start`."""
    res = start.resources
    if not math.isfinite(res.cpus) or min(res.memory_bytes, res.cpus, res.pids, res.tmp_bytes) < 0:
        raise InvalidArgument("start.resources must be finite and non-negative (0 = default)")
    if any("\0" in a for a in start.args):
        raise InvalidArgument("start.args contains a NUL byte")
    spec = StdioSpec(
        image=start.image,
        args=tuple(start.args),
        env=dict(start.env),
        job_id=start.job_id,
        resources=Resources(res.memory_bytes, res.cpus, res.pids, res.tmp_bytes),
        network=start.network,
    )
    startup = _timeout(
        start.startup_timeout_s, DEFAULT_STARTUP_S, MAX_STARTUP_S, "startup_timeout_s"
    )
    idle = _timeout(start.idle_timeout_s, DEFAULT_IDLE_S, MAX_IDLE_S, "idle_timeout_s")
    return spec, startup, idle


def _code(exc: SandboxError) -> grpc.StatusCode:
    if isinstance(exc, ImageMissing | FailedPrecondition):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(exc, InvalidArgument):
        return grpc.StatusCode.INVALID_ARGUMENT
    return grpc.StatusCode.UNAVAILABLE


async def _first(requests: AsyncIterator[pb.StdioChunk]) -> pb.StdioStart:
    try:
        first = await asyncio.wait_for(anext(requests), _FIRST_MESSAGE_S)
    except StopAsyncIteration:
        raise InvalidArgument("the stream ended before its 'start' message") from None
    except TimeoutError:
        raise InvalidArgument(f"no 'start' message within {_FIRST_MESSAGE_S:.0f} s") from None
    if first.WhichOneof("kind") != "start":
        raise InvalidArgument("the first message must be 'start'")
    return first.start


async def serve(backend: Any, requests: Any, context: Any) -> AsyncIterator[pb.StdioChunk]:
    if not isinstance(backend, StdioBackend):
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this sandbox backend runs no stdio")
    it = requests.__aiter__()
    try:
        spec, startup, idle = stdio_spec(await _first(it))
        # Env values may be secrets: only their names are logged.
        names = sorted(spec.env)
        log.info("McpStdio: %s %s (job %r, env %s)", spec.image, spec.args, spec.job_id, names)
        process = await asyncio.wait_for(backend.open_stdio(spec), startup)
    except TimeoutError:
        metrics.MCP_STDIO_STREAMS.labels("startup_timeout").inc()
        await context.abort(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"the MCP server {spec.image or spec.args!r} did not start within {startup:.0f} s",
        )
        return
    except SandboxError as exc:
        metrics.MCP_STDIO_STREAMS.labels("refused").inc()
        await context.abort(_code(exc), str(exc))
        return
    outcome = ["client_gone"]  # unless the pump says otherwise
    try:
        async for chunk in _pump(process, it, idle, context, outcome):
            yield chunk
    finally:
        metrics.MCP_STDIO_STREAMS.labels(outcome[0]).inc()
        await asyncio.shield(process.close())


class _Traffic:
    def __init__(self) -> None:
        self.last = time.monotonic()
        self.client_done = False

    def touch(self) -> None:
        self.last = time.monotonic()


async def _feed(process: StdioProcess, it: AsyncIterator[pb.StdioChunk], traffic: _Traffic) -> None:
    """Client messages into the process's stdin; its end (or `close_stdin`) is EOF."""
    try:
        async for chunk in it:
            traffic.touch()
            kind = chunk.WhichOneof("kind")
            if kind == "data":
                await process.send(chunk.data)
            elif kind == "close_stdin":
                break
    except (OSError, ConnectionError):
        pass  # the process is gone: its exit is reported from the output side
    except ArtfleetError as exc:  # a corrupt client message: stop feeding, the server sees EOF
        log.warning("stdio stream: %s", exc)
    finally:
        traffic.client_done = True
        await process.close_stdin()


async def _pump(
    process: StdioProcess,
    it: AsyncIterator[pb.StdioChunk],
    idle: float,
    context: Any,
    outcome: list[str],
) -> AsyncIterator[pb.StdioChunk]:
    traffic = _Traffic()
    feeder = asyncio.create_task(_feed(process, it, traffic), name="stdio-feed")
    stderr_tail = b""
    try:
        while True:
            wait = traffic.last + idle - time.monotonic()
            if wait <= 0:
                outcome[0] = "idle_timeout"
                await context.abort(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no traffic with the MCP server for {idle:.0f} s (it hangs, or the "
                    "client stopped talking): stopped it",
                )
            try:
                item = await asyncio.wait_for(process.output.get(), wait)
            except TimeoutError:
                continue
            if item is None:
                break
            traffic.touch()
            stream, data = item
            if stream == "stderr":
                stderr_tail = (stderr_tail + data)[-_STDERR_TAIL:]
                yield pb.StdioChunk(stderr=data)
            else:
                yield pb.StdioChunk(data=data)
        code = await process.exit_code()
        if traffic.client_done:
            outcome[0] = "exited"
            yield pb.StdioChunk(exit=pb.StdioExit(exit_code=-1 if code is None else code))
            return
        tail = stderr_tail.decode(errors="replace").strip()
        outcome[0] = "crashed"
        await context.abort(
            grpc.StatusCode.ABORTED,
            f"the MCP server exited with code {code} while the client was talking to it"
            + (f"; its stderr ends with: {tail}" if tail else ""),
        )
    finally:
        feeder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeder
