"""`Sandbox.McpStdio` on the local backend: a local command, and only where allowed."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import ClientSession
from pydantic import SecretStr
from repo_paths import FIXTURES
from waiting import wait_for_async

from artfleet.clients.mcp_guard import NON_PROTOCOL_BUDGET_BYTES, NonProtocolOutput, guard_stdout
from artfleet.clients.mcp_stdio import McpStdioError, sandbox_stdio_client
from artfleet_sandbox.__main__ import SandboxApp
from artfleet_sandbox.local_backend.stdio import LocalStdio
from artfleet_sandbox.settings import DEFAULT_SANDBOX_PATH, SandboxSettings
from artfleet_sandbox.stdio import StdioSpec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOKEN = "local-stdio-token"
SERVER = str(FIXTURES / "mcp_counter_server.py")


@asynccontextmanager
async def local_app(allow: bool) -> AsyncIterator[str]:
    settings = SandboxSettings(
        api_token=SecretStr(TOKEN),
        sandbox_backend="local",
        allow_local_stdio=allow,
        sandbox_path=f"{os.path.dirname(sys.executable)}:{DEFAULT_SANDBOX_PATH}",
    )
    app = SandboxApp(settings)
    await app.start()
    try:
        yield f"127.0.0.1:{app.server.port}"
    finally:
        await app.stop()


async def test_local_commands_are_refused_unless_allowed() -> None:
    async with local_app(allow=False) as target:
        with pytest.raises(McpStdioError) as info:
            async with (
                sandbox_stdio_client(target, TOKEN, "", [sys.executable, SERVER]) as streams,
                ClientSession(*streams) as session,
            ):
                await session.initialize()
    assert info.value.code.name == "FAILED_PRECONDITION"
    assert "ARTFLEET_ALLOW_LOCAL_STDIO" in info.value.details


async def test_an_allowed_local_server_answers_and_ends_with_the_stream() -> None:
    async with local_app(allow=True) as target:
        async with (
            sandbox_stdio_client(target, TOKEN, "", [sys.executable, SERVER]) as streams,
            ClientSession(*streams) as session,
        ):
            await session.initialize()
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert {"setup", "move", "evaluate"} <= names
            result = await session.call_tool("evaluate", {"answer": "3"})
            assert not result.is_error
        with pytest.raises(McpStdioError) as info:
            async with (
                sandbox_stdio_client(target, TOKEN, "", [sys.executable, SERVER, "--exit"]) as s,
                ClientSession(*s) as session,
            ):
                await session.initialize()
        assert info.value.code.name == "ABORTED" and "code 3" in info.value.details


NOISY = str(FIXTURES / "mcp_noisy_server.py")


async def test_a_server_flooding_stdout_through_the_sandbox_is_stopped_by_its_budget(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pid"
    async with local_app(allow=True) as target:
        args = [sys.executable, NOISY, "--flood", str(pidfile)]
        stdio = sandbox_stdio_client(target, TOKEN, "", args)
        with pytest.raises(NonProtocolOutput) as info:
            async with guard_stdout(stdio) as streams, ClientSession(*streams) as session:
                await session.initialize()
        # The sandbox stops the server once the stream is gone.
        await wait_for_async("the flooding server stopped", lambda: _gone(int(pidfile.read_text())))
    assert info.value.size > NON_PROTOCOL_BUDGET_BYTES
    assert str(info.value).startswith(f"MCP server wrote {info.value.size} bytes of non-protocol")


def _gone(pid: int) -> bool:
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True


async def test_a_server_killed_mid_flood_is_closed_at_once() -> None:
    # Its output fills the queue nobody reads (the client went away), then its pipe: close()
    # used to wait forever for that pipe's end, holding the RPC's handler.
    spec = StdioSpec(image="", args=(sys.executable, NOISY, "--flood"))
    process = await LocalStdio.start(spec, True, f"{os.path.dirname(sys.executable)}:/usr/bin")
    # 4 MiB of output fill the queue, then the pipe behind it
    await wait_for_async("the output queue full", process.output.full)
    await asyncio.wait_for(process.close(), 10)
    assert await process.exit_code() == -9
