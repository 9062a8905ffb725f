"""Scorers by name: the built-in ones and custom ones from Python entry points.

A package adds a scorer by declaring an entry point in the group `artfleet.scorers`:

    [project.entry-points."artfleet.scorers"]
    length_penalty = "my_pkg.rewards:length_penalty"

The object is either a `ScorerDef` (full control: group scoring, param checks; its
`params` may name a pydantic model that validates them, as the built-ins' do) or a
function `fn(episode: artfleet.v1.Episode, **params) -> float`, whose params are checked
against its signature when a job is submitted; a function may instead take the episode's
`trajectory` (an `art.Trajectory`) or `messages` (scorers.custom). Built-in names cannot be
replaced.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from importlib.metadata import EntryPoint, entry_points

from artfleet.specs.scorer_params import BUILTIN_PARAMS

from .answer import ANSWER_SCORERS
from .base import ScorerDef
from .custom import function_scorer
from .llm import LLM_SCORERS
from .mcp import MCP_SCORERS
from .process import EPISODE_SCORERS

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "artfleet.scorers"


def builtin_table(definitions: Iterable[ScorerDef]) -> dict[str, ScorerDef]:
    """The built-ins keyed by the kernel's table (artfleet.specs.scorer_params), in its
    order; the service refuses to start when they differ, since a built-in the kernel does
    not list is taken for a custom scorer at submit and one it lists must be implemented."""
    found: dict[str, ScorerDef] = {}
    for definition in definitions:
        if definition.name in found:
            raise ImportError(f"built-in scorer {definition.name!r} is implemented twice")
        found[definition.name] = definition
    missing = sorted(BUILTIN_PARAMS.keys() - found.keys())
    unknown = sorted(found.keys() - BUILTIN_PARAMS.keys())
    if missing or unknown:
        raise ImportError(
            f"built-in scorers without an implementation: {missing}; implemented but not"
            f" in artfleet.specs.scorer_params.BUILTIN_PARAMS: {unknown}"
        )
    for name, definition in found.items():
        if definition.params is not BUILTIN_PARAMS[name]:
            raise ImportError(f"built-in scorer {name!r} does not take the kernel's params model")
    return {name: found[name] for name in BUILTIN_PARAMS}


BUILTIN = builtin_table((*EPISODE_SCORERS, *LLM_SCORERS, *MCP_SCORERS, *ANSWER_SCORERS))


def _load(entry: EntryPoint) -> ScorerDef | None:
    if entry.name in BUILTIN:
        log.warning("entry point %s ignored: %r is a built-in scorer", entry.value, entry.name)
        return None
    try:
        loaded = entry.load()
    except Exception:  # a broken plugin must not take the service down
        log.exception("cannot load scorer entry point %s = %s", entry.name, entry.value)
        return None
    if isinstance(loaded, ScorerDef):
        return replace(loaded, name=entry.name)
    if callable(loaded):
        return function_scorer(entry.name, loaded)
    log.error("scorer entry point %s is neither a ScorerDef nor a function", entry.value)
    return None


@functools.cache
def registry() -> Mapping[str, ScorerDef]:
    """Every scorer by name (entry points are read once; `registry.cache_clear()` rereads)."""
    found = dict(BUILTIN)
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        definition = _load(entry)
        if definition is not None:
            found[entry.name] = definition
    return found


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "ScorerDef", "builtin_table", "registry"]
