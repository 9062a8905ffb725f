"""Extensions installed as Python packages: entry points read once per process.

A plugin that fails to load does not take the service down: it is listed as broken, with
the last lines of its error, and a job naming it is refused at submit with them.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

log = logging.getLogger(__name__)
ERROR_LINES = 4  # of a plugin's traceback, kept for listings and refusals


@dataclass(frozen=True)
class Provenance:
    """Where a registered name comes from: bundled, or a package and its version."""

    package: str = ""
    version: str = ""

    @property
    def bundled(self) -> bool:
        return not self.package

    def __str__(self) -> str:
        return "bundled" if self.bundled else f"{self.package} {self.version}".strip()


BUNDLED = Provenance()


@dataclass(frozen=True)
class BrokenPlugin:
    name: str
    provenance: Provenance
    error: str  # the last lines of what loading it raised

    def describe(self, what: str) -> str:
        return f"{what} {self.name!r} ({self.provenance}) failed to load: {self.error}"


@dataclass
class Plugins:
    """One entry point group's plugins: the loaded objects and the broken ones."""

    loaded: dict[str, tuple[Any, Provenance]]
    broken: dict[str, BrokenPlugin]


def error_tail(lines: int = ERROR_LINES) -> str:
    """The current exception's traceback, its last `lines` lines."""
    return " | ".join(traceback.format_exc().strip().splitlines()[-lines:])


def load_plugins(group: str, reserved: frozenset[str] = frozenset()) -> Plugins:
    """Every entry point of `group`, loaded; `reserved` names (bundled ones) are skipped."""
    plugins = Plugins({}, {})
    for entry in entry_points(group=group):
        dist = entry.dist
        provenance = Provenance(dist.name, dist.version) if dist else Provenance("unknown")
        if entry.name in reserved:
            log.warning("entry point %s ignored: %r is bundled", entry.value, entry.name)
            continue
        try:
            plugins.loaded[entry.name] = (entry.load(), provenance)
        except Exception:  # a broken plugin must not take the service down
            broken = BrokenPlugin(entry.name, provenance, error_tail())
            log.error("%s", broken.describe(f"{group} plugin"))
            plugins.broken[entry.name] = broken
    return plugins
