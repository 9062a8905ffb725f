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
from collections.abc import Mapping
from dataclasses import replace
from importlib.metadata import EntryPoint, entry_points

from .answer import ANSWER_SCORERS
from .base import ScorerDef
from .custom import function_scorer
from .llm import LLM_SCORERS
from .mcp import MCP_SCORERS
from .process import EPISODE_SCORERS

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "artfleet.scorers"
BUILTIN: dict[str, ScorerDef] = {
    d.name: d for d in (*EPISODE_SCORERS, *LLM_SCORERS, *MCP_SCORERS, *ANSWER_SCORERS)
}


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


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "ScorerDef", "registry"]
