"""Fixtures for the local sandbox backend: real processes, in both isolation modes."""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from collections.abc import AsyncIterator, Callable

import pytest

from artfleet_sandbox.backend import SandboxError
from artfleet_sandbox.local_backend import LocalBackend
from artfleet_sandbox.local_backend.config import DEFAULT_SANDBOX_PATH, LocalConfig

# Sandboxed commands get a clean PATH; put this interpreter (which has pytest) first, and
# keep its installation visible inside bubblewrap even when it lives under /root.
SANDBOX_PATH = f"{os.path.dirname(sys.executable)}:{DEFAULT_SANDBOX_PATH}"


def make_config(**overrides: object) -> LocalConfig:
    base = LocalConfig(
        path=SANDBOX_PATH,
        bwrap_expose_paths=(sys.base_prefix, sys.prefix),
        reap_interval_s=3600,  # tests that need the reaper ask for it
        allow_unisolated=True,  # the "process" mode runs without bubblewrap on purpose
    )
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


@pytest.fixture
def config_factory() -> Callable[..., LocalConfig]:
    return make_config


ISOLATION_MODES = [
    pytest.param("never", id="process"),
    pytest.param(
        "require",
        id="bwrap",
        marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing"),
    ),
]


@pytest.fixture(params=ISOLATION_MODES)
def isolation_mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def backend_factory(
    isolation_mode: str,
) -> Callable[..., LocalBackend]:
    def _make(**overrides: object) -> LocalBackend:
        return LocalBackend(make_config(use_bwrap=isolation_mode, **overrides))

    return _make


@pytest.fixture
async def backend(backend_factory: Callable[..., LocalBackend]) -> AsyncIterator[LocalBackend]:
    instance = backend_factory()
    try:
        await instance.start()
    except SandboxError as exc:  # bwrap installed but user namespaces are not allowed here
        pytest.skip(str(exc))
    yield instance
    await instance.stop()
