"""Real Docker for the sandbox tests: the engine and the base image, or skip (fail in CI).

Every container the tests create carries a deployment label unique to this test run; at
the end of the run none may be left (they are removed, and the run fails, if any are).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import pytest
from sandbox_docker_kit import (
    TEST_IMAGE,
    AppFactory,
    BackendFactory,
    our_containers,
    sandbox_settings,
)

from artfleet_sandbox.__main__ import SandboxApp
from artfleet_sandbox.docker_backend import DockerBackend, DockerConfig


@pytest.fixture(scope="session")
def docker_client(require_infra: Callable[[bool, str], None]) -> Iterator[Any]:
    import docker

    require = require_infra
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        require(False, f"no Docker engine: {exc}")
    try:
        client.images.get(TEST_IMAGE)
    except docker.errors.ImageNotFound:
        require(False, f"image {TEST_IMAGE} missing: run scripts/build_base_image.sh")
    yield client
    client.close()


@pytest.fixture(scope="session")
def deployment(docker_client: Any) -> Iterator[str]:
    name = f"artfleet-test-{os.getpid()}"
    yield name
    left = our_containers(docker_client, name)
    for container in left:
        container.remove(force=True, v=True)
    assert not left, f"{len(left)} sandbox containers were left behind: {[c.name for c in left]}"


@pytest.fixture
def docker_config(deployment: str) -> DockerConfig:
    return DockerConfig(
        deployment=deployment,
        default_image=TEST_IMAGE,
        pool_size=0,
        reap_interval_s=3600,
        stop_timeout_s=30,
    )


@pytest.fixture
def docker_backend(docker_config: DockerConfig) -> BackendFactory:
    @asynccontextmanager
    async def make(**overrides: Any) -> AsyncIterator[DockerBackend]:
        backend = DockerBackend(replace(docker_config, **overrides))
        await backend.start()
        try:
            yield backend
        finally:
            await backend.stop()

    return make


@pytest.fixture
def sandbox_app(deployment: str) -> AppFactory:
    """A real sandbox service (auth, health, metrics) with the docker backend, on port 0."""

    @asynccontextmanager
    async def make(**overrides: Any) -> AsyncIterator[SandboxApp]:
        app = SandboxApp(sandbox_settings(deployment, **overrides))
        await app.start()
        try:
            yield app
        finally:
            await app.stop()

    return make
