"""A process whose stdin/stdout travel over the `McpStdio` stream: what backends offer.

An MCP environment (HUD style) is a server spoken to over stdio, usually started as
`docker run -i IMAGE`. The sandbox is the only service with the Docker socket, so it
starts the process and pipes its stdio; the backend decides how (docker: a container
with the sandbox's limits and labels; local: a command, only where allowed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from artfleet_sandbox.backend import Resources, SandboxError

StreamName = Literal["stdout", "stderr"]
# One piece of output, or None once the process closed its output (it exited).
Output = tuple[StreamName, bytes] | None


class FailedPrecondition(SandboxError):
    """The deployment cannot run this (an image it lacks, local commands not allowed):
    maps to FAILED_PRECONDITION."""


@dataclass(frozen=True)
class StdioSpec:
    image: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    job_id: str = ""
    resources: Resources = field(default_factory=Resources)
    network: bool = False


class StdioProcess(Protocol):
    """A running process: `output` yields its stdout/stderr, then None when it ended."""

    output: asyncio.Queue[Output]

    async def send(self, data: bytes) -> None: ...

    async def close_stdin(self) -> None: ...

    async def exit_code(self) -> int | None:
        """After `output` gave None: the exit code, None if the engine cannot tell."""
        ...

    async def close(self) -> None:
        """Kill the process and free what it held (idempotent)."""
        ...


@runtime_checkable
class StdioBackend(Protocol):
    async def open_stdio(self, spec: StdioSpec) -> StdioProcess: ...
