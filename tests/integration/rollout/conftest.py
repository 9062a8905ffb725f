"""The package of ART rollout shapes (`art_shapes_plugin`), installed with `pip` as a user
installs theirs, and a policy endpoint for its episodes: shared by the shape and budget
modules (a module of this folder with fixtures of these names keeps its own)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from art_shapes_plugin import ENTRY_POINTS, PLUGIN
from plugin_dist import pip_install_package
from plugin_episodes import EpisodeFleet, episode_fleet

from artfleet_rollout.environments import registry as environments


@pytest.fixture(scope="session")
def shapes_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("shapes") / "site"
    pip_install_package(target, "artfleet_test_shapes", PLUGIN, ENTRY_POINTS)
    return target


@pytest.fixture
def plugin(shapes_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(shapes_site))
    monkeypatch.delitem(sys.modules, "artfleet_test_shapes", raising=False)
    environments.reload_plugins()
    yield
    environments.reload_plugins()


@pytest_asyncio.fixture
async def fleet(plugin: None) -> AsyncIterator[EpisodeFleet]:
    async with episode_fleet() as running:
        yield running
