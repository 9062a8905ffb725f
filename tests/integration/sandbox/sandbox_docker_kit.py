"""Helpers shared by the Docker sandbox tests and their conftest."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from pydantic import SecretStr

from artfleet_sandbox.__main__ import SandboxApp
from artfleet_sandbox.docker_backend import DockerBackend
from artfleet_sandbox.docker_backend.config import LABEL_DEPLOYMENT
from artfleet_sandbox.settings import SandboxSettings

TEST_IMAGE = os.environ.get("ARTFLEET_TEST_SANDBOX_IMAGE", "artfleet/base:bookworm")
TOKEN = "sandbox-docker-test-token"

BackendFactory = Callable[..., AbstractAsyncContextManager[DockerBackend]]
AppFactory = Callable[..., AbstractAsyncContextManager[SandboxApp]]


def our_containers(docker_client: Any, deployment: str) -> list[Any]:
    return list(
        docker_client.containers.list(
            all=True,
            filters={"label": f"{LABEL_DEPLOYMENT}={deployment}"},
            # a container the reaper removes between the list and its inspect is not an error
            ignore_removed=True,
        )
    )


def sandbox_settings(deployment: str, **overrides: Any) -> SandboxSettings:
    values: dict[str, Any] = {
        "api_token": SecretStr(TOKEN),
        "sandbox_backend": "docker",
        "deployment": deployment,
        "sandbox_image": TEST_IMAGE,
        "pool_size": 1,
        "max_timeout_s": 30,
        "reap_interval_s": 3600,
    }
    values.update(overrides)
    return SandboxSettings(**values)
