"""Fleets shared across integration modules (docs/testing.md, "Rules for a new test")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fleet_jobs import trainer_of
from torch_fleet import shared_torch_fleet

from artfleet.v1 import trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet


@pytest.fixture(scope="session")
def torch_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    """One torch-engine fleet for the session (tests/support/torch_fleet.py). A module that
    uses it is listed in `SHARED_FLEET_MODULES` (tests/support/xdist_scopes.py)."""
    with shared_torch_fleet(tmp_path_factory.mktemp("torch-fleet")) as fleet:
        yield fleet


@pytest.fixture(scope="session")
def torch_trainer(torch_fleet: LocalFleet) -> Iterator[trainer_pb2_grpc.TrainerStub]:
    with trainer_of(torch_fleet) as trainer:
        yield trainer
