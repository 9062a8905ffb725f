"""One real fleet for the API tests, session-wide (the fleet tests, the schema fuzzing and
the console test share it): see tests/support/api_fleet.py."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator

import httpx
import pytest
from api_fleet import api_fleet as make_fleet
from fleet_jobs import started

from artfleet_cli.fleet import LocalFleet


@pytest.fixture(scope="session")
def api_fleet(
    tmp_path_factory: pytest.TempPathFactory, require_infra: Callable[[bool, str], None]
) -> Iterator[LocalFleet]:
    require_infra(shutil.which("bwrap") is not None, "bubblewrap (bwrap) is not installed")
    # Every process, the API included, must shut down on SIGTERM by itself.
    with started(make_fleet(tmp_path_factory.mktemp("api-fleet"))) as fleet:
        yield fleet


@pytest.fixture
def api(api_fleet: LocalFleet) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {api_fleet.token}"}
    with httpx.Client(base_url=api_fleet.api_url, headers=headers, timeout=600) as client:
        yield client
