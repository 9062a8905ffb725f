"""The plugins this process runs, listed once: what the `artfleet_rollout_plugins` metric
exports and `Rollout.ListPlugins` answers (the API's /health shows it)."""

from __future__ import annotations

import contextlib

from artfleet.v1 import rollout_pb2
from artfleet_rollout import metrics
from artfleet_rollout.agents import kinds
from artfleet_rollout.environments import registry as environments
from artfleet_rollout.plugins import Provenance


def installed_plugins() -> list[rollout_pb2.Plugin]:
    """Every agent kind and environment an installed package declared; a broken one (its
    import failed, or its factory did) with the last lines of its error. Builds each
    plugin environment once, so a factory that fails is listed as broken from the start."""
    for name in list(environments.plugins().loaded):
        with contextlib.suppress(environments.BrokenEnvironment):
            environments.get_environment(name)
    listed = []
    for group, found, broken in (
        (kinds.ENTRY_POINT_GROUP, kinds.plugins(), kinds.broken_agents()),
        (
            environments.ENTRY_POINT_GROUP,
            environments.plugins(),
            environments.broken_environments(),
        ),
    ):
        for name, (_, source) in found.loaded.items():
            if name not in broken:
                listed.append(_row(group, name, source, "loaded"))
        for name, failed in broken.items():
            listed.append(_row(group, name, failed.provenance, "broken", failed.error))
    return listed


def _row(
    group: str, name: str, source: Provenance, state: str, error: str = ""
) -> rollout_pb2.Plugin:
    return rollout_pb2.Plugin(
        group=group,
        name=name,
        package=source.package,
        version=source.version,
        state=state,
        error=error,
    )


def export_metrics(plugins: list[rollout_pb2.Plugin]) -> None:
    """One `artfleet_rollout_plugins` sample per plugin: what runs where."""
    for p in plugins:
        metrics.PLUGINS.labels(p.group, p.name, p.package, p.version, p.state).set(1)
