"""An MCP stdio server that runs inside the sandbox service, spoken to from here.

    async with sandbox_stdio_client(target, token, "artfleet/mcp-2048:latest") as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()

`sandbox_stdio_client` is the official SDK's `mcp.client.stdio.stdio_client` with the
process on the sandbox (`Sandbox.McpStdio`, `docker run -i IMAGE ARGS` there) instead of
here: the same streams (anyio memory streams of `SessionMessage`, one JSON-RPC message
per line), so `ClientSession` works unchanged. The rollout needs no Docker socket.

When the sandbox ends the stream with an error (the server crashed, hung past the idle
timeout, its image is missing), the session's pending request fails ("Connection
closed") and leaving the context raises `McpStdioError` with the sandbox's status and
message, chained to what the body raised. A stdout line that is no JSON-RPC message reaches
the session as an exception, like the SDK's; `artfleet.clients.mcp_guard.guard_stdout`
(which the rollout puts around this transport) stops a server that writes too many.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

import anyio
import grpc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

# The rollout and reward extras install the SDK (the core package does not).
from mcp import types as mcp_types
from mcp.shared.message import SessionMessage

from artfleet.runtime.rpc.client import CHANNEL_OPTIONS, auth_metadata
from artfleet.v1 import sandbox_pb2, sandbox_pb2_grpc

log = logging.getLogger(__name__)


ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


class McpStdioError(RuntimeError):
    """The sandbox ended the MCP server's stream with an error status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"MCP server in the sandbox: {code.name}: {details}")
        self.code = code
        self.details = details


@dataclass(frozen=True)
class StdioLimits:
    """0 = the sandbox's defaults (startup 60 s, idle 300 s)."""

    startup_timeout_s: float = 0.0
    idle_timeout_s: float = 0.0


def start_message(
    image: str,
    args: Sequence[str],
    env: Mapping[str, str],
    job_id: str,
    limits: StdioLimits,
    network: bool,
) -> sandbox_pb2.StdioChunk:
    return sandbox_pb2.StdioChunk(
        start=sandbox_pb2.StdioStart(
            image=image,
            args=list(args),
            env=dict(env),
            job_id=job_id,
            network=network,
            startup_timeout_s=limits.startup_timeout_s,
            idle_timeout_s=limits.idle_timeout_s,
        )
    )


@contextlib.asynccontextmanager
async def sandbox_stdio_client(
    target: str,
    token: str,
    image: str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    *,
    job_id: str = "",
    limits: StdioLimits = StdioLimits(),
    network: bool = False,
) -> AsyncIterator[
    tuple[
        MemoryObjectReceiveStream[SessionMessage | Exception],
        MemoryObjectSendStream[SessionMessage],
    ]
]:
    """(read_stream, write_stream) for `mcp.ClientSession`, the server in the sandbox."""
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    outbox = anyio.create_memory_object_stream[sandbox_pb2.StdioChunk](16)
    first = start_message(image, args, env or {}, job_id, limits, network)
    failure: list[McpStdioError] = []

    async def requests() -> AsyncIterator[sandbox_pb2.StdioChunk]:
        yield first
        async with outbox[1]:
            async for chunk in outbox[1]:
                yield chunk

    async with grpc.aio.insecure_channel(target, options=list(CHANNEL_OPTIONS)) as channel:
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        call = stub.McpStdio(requests(), metadata=auth_metadata(token))

        async def reader() -> None:
            buffer = b""
            async with read_writer:
                try:
                    async for chunk in call:
                        kind = chunk.WhichOneof("kind")
                        if kind == "stderr":
                            log.debug(
                                "MCP server stderr: %s", chunk.stderr.decode(errors="replace")
                            )
                        elif kind == "data":
                            *lines, buffer = (buffer + chunk.data).split(b"\n")
                            for line in lines:
                                if line.strip():
                                    await read_writer.send(_parse(line))
                except grpc.aio.AioRpcError as exc:
                    failure.append(McpStdioError(exc.code(), exc.details() or ""))
                    log.warning("%s", failure[-1])
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    pass  # the session is gone

        async def writer() -> None:
            async with write_reader, outbox[0]:
                async for message in write_reader:
                    line = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await outbox[0].send(sandbox_pb2.StdioChunk(data=(line + "\n").encode()))

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                tg.start_soon(writer)
                try:
                    yield read_stream, write_stream
                finally:
                    tg.cancel_scope.cancel()
        except Exception as exc:  # not a cancellation: that must go on as it is
            if failure and not isinstance(exc, McpStdioError):
                raise failure[0] from exc
            raise
        finally:
            call.cancel()  # the sandbox kills the process and removes its container
        if failure:
            raise failure[0]


def _parse(line: bytes) -> SessionMessage | Exception:
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as exc:
        return exc
    return SessionMessage(message)
