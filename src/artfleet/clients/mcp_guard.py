"""A stdio MCP server that writes what is no protocol to its stdout (logging, a banner, a
traceback per line) is stopped once that passes a small budget, with that reason, instead
of flooding the client's log until a request times out.

    async with guard_stdout(stdio_client(params)) as (read, write):
        async with ClientSession(read, write) as session: ...

The SDK's stdio transports (the local `mcp.client.stdio.stdio_client` and ours through the
sandbox, `artfleet.clients.mcp_stdio`) hand each stdout line that is no JSON-RPC message to
the session as an exception, which the session ignores; the local one also logs a
traceback for each. `guard_stdout` sits between the transport and the session and counts
those lines' bytes. Past NON_PROTOCOL_BUDGET_BYTES it ends the session's stream (pending
requests fail at once, the server is stopped as the transport closes) and leaving the
context raises `NonProtocolOutput`: "MCP server wrote N bytes of non-protocol output to
stdout". The SDK's traceback per line is dropped here (the count replaces it); a server
under the budget gets one warning with the count when its session ends.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
from mcp.shared.message import SessionMessage

log = logging.getLogger(__name__)

NON_PROTOCOL_BUDGET_BYTES = 64 * 1024
Streams = tuple[Any, Any]  # (read, write) as mcp.ClientSession takes them

# The SDK's record for each line of stdout that does not parse (mcp.client.stdio).
_SDK_PARSE_FAILURE = "Failed to parse JSONRPC message from server"


class _CountedByTheGuard(logging.Filter):
    """Drops the SDK's traceback per non-protocol stdout line: a flooding server wrote MBs
    of them a second into the service's log. guard_stdout counts the lines instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != _SDK_PARSE_FAILURE


logging.getLogger("mcp.client.stdio").addFilter(_CountedByTheGuard())


class NonProtocolOutput(RuntimeError):
    """The server wrote more than its budget of non-protocol output to stdout."""

    def __init__(self, size: int, first: str, budget: int) -> None:
        super().__init__(
            f"MCP server wrote {size} bytes of non-protocol output to stdout (more than "
            f"{budget}): stopped; its first such line: {first!r}"
        )
        self.size = size


def line_of(error: Exception) -> str:
    """The stdout line behind a parse error of the transport (pydantic's ValidationError
    keeps its input: the line, or what it parsed to when it is JSON but no JSON-RPC)."""
    errors = getattr(error, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            found = errors()
            raw = found[0].get("input") if found else None
            if isinstance(raw, bytes):  # our sandbox transport parses bytes
                return raw.decode(errors="replace")
            if isinstance(raw, str):
                return raw
            if raw is not None:
                return json.dumps(raw, default=str)
    return str(error)


class _Tally:
    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.size = 0
        self.first = ""

    def add(self, error: Exception) -> bool:
        """Counts one non-protocol line; whether the budget is now spent."""
        line = line_of(error)
        self.first = self.first or line[:120]
        self.size += len(line.encode(errors="replace")) + 1  # its newline too
        return self.size > self.budget

    def error(self) -> NonProtocolOutput:
        return NonProtocolOutput(self.size, self.first, self.budget)


@contextlib.asynccontextmanager
async def guard_stdout(
    streams: AbstractAsyncContextManager[Streams], budget: int = NON_PROTOCOL_BUDGET_BYTES
) -> AsyncIterator[Streams]:
    """`streams` (a stdio transport's context) with its read stream counted (see above);
    raises NonProtocolOutput on leaving once the server spent its budget."""
    tally = _Tally(budget)
    seen: Exception | None = None  # what the session saw of it: "Connection closed"
    async with streams as (read, write):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def pump() -> None:
            async with send:  # closed on return: the session sees the server gone
                async for item in read:
                    if isinstance(item, Exception) and tally.add(item):
                        return  # no more reads: a flooding server blocks on its pipe
                    try:
                        await send.send(item)
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                        return  # the session is gone

        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(pump)
                try:
                    yield receive, write
                finally:
                    tasks.cancel_scope.cancel()
                    receive.close()
        except Exception as exc:
            if tally.size <= budget:
                raise
            seen = exc  # the transport closes as after a clean exit, then the reason is raised
    if tally.size > budget:  # raised here, not in the transport's task group that wraps it
        raise tally.error() from seen
    if tally.size:
        log.warning(
            "MCP server wrote %d bytes of non-protocol output to stdout (ignored); its "
            "first such line: %r",
            tally.size,
            tally.first,
        )
