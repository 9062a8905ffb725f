"""`Sandbox.McpStdio` on the local backend: a local command, and only where allowed."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp import ClientSession
from pydantic import SecretStr

from artfleet.clients.mcp_stdio import McpStdioError, sandbox_stdio_client
from artfleet_sandbox.__main__ import SandboxApp
from artfleet_sandbox.settings import DEFAULT_SANDBOX_PATH, SandboxSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOKEN = "local-stdio-token"
SERVER = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp_counter_server.py")


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
