"""The agent kinds, by name: the one list of the bundled ones (a module each) and the
kinds packages add through the entry point group `artfleet.agents`:

    [project.entry-points."artfleet.agents"]
    my-kind = "my_pkg.agent:run"

A kind's runner is `async def run(ctx: EpisodeContext, trajectory: art.Trajectory,
episode: artfleet.v1.Episode) -> None` (agents.context says what it receives and fills).
Plugins are read once per process; a bundled name cannot be replaced; a plugin that fails
to load is listed as broken, and an environment naming its kind is refused.
"""

from __future__ import annotations

import functools

from artfleet_rollout.agents.context import AgentRun
from artfleet_rollout.plugins import BUNDLED as BUNDLED_SOURCE
from artfleet_rollout.plugins import BrokenPlugin, Plugins, Provenance, load_plugins

from . import art, mcp, single, terminal, tools

ENTRY_POINT_GROUP = "artfleet.agents"
BUNDLED: dict[str, AgentRun] = {
    terminal.KIND: terminal.run_terminal,
    tools.KIND: tools.run_tools,
    mcp.KIND: mcp.run_mcp,
    single.KIND: single.run_single,
    art.KIND: art.run_art,
}


class UnknownAgent(ValueError):
    """No such kind, or its plugin is broken (the message says which, and why)."""


@functools.cache
def plugins() -> Plugins:
    return load_plugins(ENTRY_POINT_GROUP, frozenset(BUNDLED))


def agent_kinds() -> dict[str, Provenance]:
    """Every usable kind and where it comes from."""
    installed = {kind: source for kind, (_, source) in plugins().loaded.items()}
    return dict.fromkeys(BUNDLED, BUNDLED_SOURCE) | installed


def broken_agents() -> dict[str, BrokenPlugin]:
    return dict(plugins().broken)


def agent_runner(kind: str) -> AgentRun:
    """The runner of `kind`; UnknownAgent naming the known kinds (or the plugin's error)."""
    if kind in BUNDLED:
        return BUNDLED[kind]
    loaded = plugins().loaded.get(kind)
    if loaded is not None and callable(loaded[0]):
        run: AgentRun = loaded[0]
        return run
    broken = plugins().broken.get(kind)
    if broken is not None:
        raise UnknownAgent(broken.describe("agent kind"))
    if loaded is not None:
        raise UnknownAgent(f"agent kind {kind!r} ({loaded[1]}) is not a callable runner")
    raise UnknownAgent(f"unknown agent kind {kind!r}; known: {', '.join(sorted(agent_kinds()))}")


def reload_plugins() -> None:
    """Reads the entry points again (tests; a process reads them once)."""
    plugins.cache_clear()
