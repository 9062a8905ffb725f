"""The `module_tmp` fixture (tests/conftest.py provides it to every test module)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def module_tmp(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], Path]]:
    """Folders for a module's fixtures (fleets, models, checkpoints): removed when the
    module is done if none of its tests failed meanwhile. pytest keeps `tmp_path_factory`'s
    folders to the session's end, and the modules' gigabytes piled up on CI's disk until it
    was full; a failure keeps them to read."""
    failed = request.session.testsfailed
    made: list[Path] = []

    def make(name: str) -> Path:
        made.append(tmp_path_factory.mktemp(name))
        return made[-1]

    yield make
    if request.session.testsfailed == failed:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
