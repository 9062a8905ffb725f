"""`Sandbox.McpStdio` end to end: a real MCP server (official SDK) in a real container,
started by a real sandbox service and driven by `mcp.ClientSession` through
`artfleet.clients.mcp_stdio.sandbox_stdio_client`.

The server image is built by scripts/build_mcp_image.sh from tests/fixtures'
counter server (FROM the base image; mcp installed from PyPI wheels) when missing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from mcp import ClientSession
from prometheus_client import REGISTRY
from repo_paths import ROOT
from sandbox_docker_kit import TOKEN, AppFactory, our_containers

from artfleet.clients.mcp_stdio import McpStdioError, StdioLimits, sandbox_stdio_client
from artfleet_sandbox.__main__ import SandboxApp
from artfleet_sandbox.docker_backend.config import LABEL_JOB, LABEL_SESSION

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MCP_IMAGE = os.environ.get("ARTFLEET_TEST_MCP_IMAGE", "artfleet/mcp-test-counter:latest")


@pytest.fixture(scope="module")
def mcp_image(docker_client: Any, require_infra: Callable[[bool, str], None]) -> str:
    import docker

    try:
        docker_client.images.get(MCP_IMAGE)
    except docker.errors.ImageNotFound:
        build = subprocess.run(
            [
                str(ROOT / "scripts/build_mcp_image.sh"),
                "--tag",
                MCP_IMAGE,
                "--server",
                str(ROOT / "tests/fixtures/mcp_counter_server.py"),
            ],
            env={**os.environ, "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            check=False,
        )
        require_infra(build.returncode == 0, f"cannot build {MCP_IMAGE}: {build.stderr[-800:]}")
    return MCP_IMAGE


@pytest.fixture
async def app(sandbox_app: AppFactory, mcp_image: str) -> AsyncIterator[SandboxApp]:
    async with sandbox_app(pool_size=0) as running:
        yield running


def _streams(outcome: str) -> float:
    labels = {"outcome": outcome}
    return REGISTRY.get_sample_value("artfleet_sandbox_mcp_stdio_streams_total", labels) or 0.0


def _target(app: SandboxApp) -> str:
    return f"127.0.0.1:{app.server.port}"


async def _until_gone(docker_client: Any, deployment: str, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while our_containers(docker_client, deployment):
        assert time.monotonic() < deadline, "the MCP server's container was left behind"
        await asyncio.sleep(0.2)


async def test_a_client_session_lists_and_calls_tools_in_a_container(
    app: SandboxApp, docker_client: Any, deployment: str, mcp_image: str
) -> None:
    async with (
        sandbox_stdio_client(_target(app), TOKEN, mcp_image, job_id="job-mcp") as streams,
        ClientSession(*streams) as session,
    ):
        await session.initialize()
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert {"setup", "move", "evaluate"} <= names
        # The server runs in one of the sandbox's own containers: its labels, so the
        # reaper and cleanup-by-label apply.
        (container,) = our_containers(docker_client, deployment)
        assert container.labels[LABEL_JOB] == "job-mcp" and container.labels[LABEL_SESSION]
        assert container.attrs["HostConfig"]["ReadonlyRootfs"] is True
        await session.call_tool("setup", {"start": 0, "target": 2})
        for _ in range(2):
            await session.call_tool("move", {"direction": "up"})
        result = await session.call_tool("evaluate", {})
        assert result.structured_content is not None or result.content
        text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
        assert json.loads(text) == {"done": True, "reward": 1.0}
    await _until_gone(docker_client, deployment)


async def test_a_crashing_server_ends_with_its_exit_code_and_stderr(
    app: SandboxApp, docker_client: Any, deployment: str, mcp_image: str
) -> None:
    crash = ["sh", "-c", "head -n 1 >/dev/null; echo 'boom: bad config' >&2; exit 5"]
    crashed = _streams("crashed")
    started = time.monotonic()
    with pytest.raises(McpStdioError) as info:
        async with (
            sandbox_stdio_client(_target(app), TOKEN, mcp_image, crash) as streams,
            ClientSession(*streams) as session,
        ):
            await session.initialize()
    assert info.value.code.name == "ABORTED"
    assert _streams("crashed") == crashed + 1
    assert "code 5" in info.value.details and "boom: bad config" in info.value.details
    assert time.monotonic() - started < 60
    await _until_gone(docker_client, deployment)


async def test_a_hanging_server_ends_at_the_idle_timeout(
    app: SandboxApp, docker_client: Any, deployment: str, mcp_image: str
) -> None:
    limits = StdioLimits(idle_timeout_s=3)
    hung = _streams("idle_timeout")
    started = time.monotonic()
    with pytest.raises(McpStdioError) as info:
        async with (
            sandbox_stdio_client(
                _target(app), TOKEN, mcp_image, ["sleep", "600"], limits=limits
            ) as streams,
            ClientSession(*streams) as session,
        ):
            await session.initialize()
    assert info.value.code.name == "DEADLINE_EXCEEDED"
    assert "3 s" in info.value.details
    assert _streams("idle_timeout") == hung + 1
    assert time.monotonic() - started < 60
    await _until_gone(docker_client, deployment)


async def test_a_missing_image_is_failed_precondition_naming_it(app: SandboxApp) -> None:
    with pytest.raises(McpStdioError) as info:
        async with (
            sandbox_stdio_client(_target(app), TOKEN, "artfleet/no-such-mcp:1") as streams,
            ClientSession(*streams) as session,
        ):
            await session.initialize()
    assert info.value.code.name == "FAILED_PRECONDITION"
    assert "artfleet/no-such-mcp:1" in info.value.details


async def test_the_mcp_agent_names_a_missing_image_in_its_failure(app: SandboxApp) -> None:
    # What the job's error shows: the sandbox's reason, not the SDK's "Connection closed".
    from artfleet_rollout.agents.mcp_env import McpEndpoint, McpFailure, open_environment
    from artfleet_rollout.environments import McpTask, ToolCallSpec

    config = {"env": {"command": "docker", "args": ["run", "-i", "artfleet/no-such-mcp:1"]}}
    task = McpTask(config, ToolCallSpec("evaluate"))
    with pytest.raises(McpFailure) as info:
        async with open_environment(task, McpEndpoint(_target(app), TOKEN, 30.0)) as environment:
            await environment.start()
    message = str(info.value)
    assert message.startswith("MCP server 'env' did not start: FAILED_PRECONDITION")
    assert "artfleet/no-such-mcp:1" in message and "Connection closed" not in message


async def test_secret_env_reaches_the_server_but_not_the_log(
    app: SandboxApp,
    mcp_image: str,
    caplog: pytest.LogCaptureFixture,
    docker_client: Any,
    deployment: str,
) -> None:
    caplog.set_level(logging.INFO)
    script = 'head -n 1 >/dev/null; [ "${API_KEY#s3cr}" = 3t-x ] && echo key-ok >&2; exit 1'
    with pytest.raises(McpStdioError) as info:
        async with (
            sandbox_stdio_client(
                _target(app), TOKEN, mcp_image, ["sh", "-c", script], env={"API_KEY": "s3cr3t-x"}
            ) as streams,
            ClientSession(*streams) as session,
        ):
            await session.initialize()
    assert "key-ok" in info.value.details  # the process saw it
    assert "API_KEY" in caplog.text and "s3cr3t-x" not in caplog.text
    await _until_gone(docker_client, deployment)
