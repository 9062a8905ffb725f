"""`python -m artfleet.runtime.healthcheck`, the compose healthcheck, against a real gRPC server."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from artfleet.runtime.config import ServerSettings
from artfleet.runtime.rpc.server import GrpcServer
from artfleet.runtime.service import free_port


@pytest.fixture
async def server() -> AsyncIterator[GrpcServer]:
    settings = ServerSettings(api_token=SecretStr("health-test-token"), port=0, metrics_port=0)
    srv = GrpcServer(settings, "test", [], [])
    await srv.start()
    yield srv
    await srv.stop(1)


async def _probe(*args: str, port: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"ARTFLEET_PORT": str(port)} if port else {})}
    # The probe is blocking gRPC in its own process: the server's loop must keep running.
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "artfleet.runtime.healthcheck", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


async def test_exit_1_until_serving_then_0(server: GrpcServer) -> None:
    done = await _probe(port=server.port)  # ARTFLEET_PORT: the container's own service
    assert done.returncode == 1 and "NOT_SERVING" in done.stderr
    await server.set_serving(True)
    done = await _probe(f"127.0.0.1:{server.port}")
    assert done.returncode == 0 and "SERVING" in done.stdout


async def test_exit_1_when_nothing_listens() -> None:
    done = await _probe(f"127.0.0.1:{free_port()}", "--timeout", "1")
    assert done.returncode == 1 and "UNAVAILABLE" in done.stderr
