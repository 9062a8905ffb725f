"""Environments by name. Each is loaded once, on first use, and then shared: they are
immutable, so every rollout worker coroutine can read the same instance.

A name is either a bundled environment (`shell-tasks`) or a loader with its source,
`<loader>:<path>` (`jsonl:/data/prompts.jsonl`, `swebench:/data/lite.parquet`): the
loader reads the local file (or a `datasets` dataset saved on disk) at first use, and again
when the file changes (its modification time or size), so a file fixed after the trainer
refused a job for its bad records is read anew, not served from the cache.

Packages add environments through the entry point group `artfleet.environments`, a name
and a factory (a function returning an `Environment`, an `Environment`, or an ART rollout
function with its scenarios: art_environment.ArtEnvironment):

    [project.entry-points."artfleet.environments"]
    my-game = "my_pkg.env:load_my_game"

They are read once per process; a bundled name cannot be replaced. One that fails to
load (or whose factory raises) is listed as broken with its error, and a job naming it is
refused with it (BrokenEnvironment).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path

from artfleet_rollout.plugins import BUNDLED, BrokenPlugin, Plugins, Provenance, error_tail
from artfleet_rollout.plugins import load_plugins as _load_plugins

from . import bundled_agents, calculator, code_fix, math_single, repo_loaders, shell_tasks
from .base import Environment, UnknownEnvironment
from .loaders import load_hud, load_jsonl

ENTRY_POINT_GROUP = "artfleet.environments"

_FACTORIES: dict[str, Callable[[], Environment]] = {
    shell_tasks.NAME: shell_tasks.load_shell_tasks,
    bundled_agents.TOOL_SHELL: bundled_agents.load_tool_shell,
    bundled_agents.GAME_2048: bundled_agents.load_game_2048,
    math_single.NAME: math_single.load_math_single,
    code_fix.NAME: code_fix.load_code_fix,
    calculator.NAME: calculator.load_calculator,
}
# loader name -> (source path or dataset name) -> Environment named "<loader>:<source>"
_LOADERS: dict[str, Callable[[str], Environment]] = {
    "hud": load_hud,
    "jsonl": load_jsonl,
    **repo_loaders.LOADERS,
}
Stamp = tuple[int, int] | None  # a loader source's (mtime_ns, size); None = not a file
_LOADED: dict[str, tuple[Environment, Stamp]] = {}
_LOCK = threading.Lock()  # Celery may run threads; load each environment exactly once


_BUNDLED_NAMES = frozenset(_FACTORIES)


class BrokenEnvironment(ValueError):
    """A plugin environment that failed to load, or whose factory raised."""


@functools.cache
def plugins() -> Plugins:
    return _load_plugins(ENTRY_POINT_GROUP, _BUNDLED_NAMES)


def _plugin_factory(name: str) -> Callable[[], Environment] | None:
    loaded = plugins().loaded.get(name)
    if loaded is None:
        return None
    made, source = loaded

    def build() -> Environment:
        # An ART rollout function with its scenarios (imported here: it imports us).
        from artfleet_rollout.art_environment import ArtEnvironment
        from artfleet_rollout.art_shapes import ArtEnvironmentError

        try:
            if isinstance(made, ArtEnvironment):
                environment = made.environment(name)
            else:
                environment = made() if callable(made) else made
        except ArtEnvironmentError as exc:  # its own words say it all; no traceback
            error = str(exc)
        except Exception:
            error = error_tail()
        else:
            if isinstance(environment, Environment):
                return environment
            error = f"its entry point gave {type(environment).__name__}, not an Environment"
        # Listed as broken from now on (envs list), and refused by name with its error.
        broken = plugins().broken[name] = BrokenPlugin(name, source, error)
        raise BrokenEnvironment(broken.describe("environment"))

    return build


def environment_sources() -> dict[str, Provenance]:
    """Every named environment (bundled and plugins; not loader sources) and its origin."""
    installed = {n: source for n, (_, source) in plugins().loaded.items()}
    return {n: BUNDLED for n in _FACTORIES} | installed


def broken_environments() -> dict[str, BrokenPlugin]:
    return dict(plugins().broken)


def reload_plugins() -> None:
    """Reads the entry points again (tests; a process reads them once)."""
    with _LOCK:
        for name in plugins().loaded:
            _LOADED.pop(name, None)
        plugins.cache_clear()


def register_environment(name: str, factory: Callable[[], Environment]) -> None:
    """Adds (or replaces, for tests) an environment factory."""
    with _LOCK:
        _FACTORIES[name] = factory
        _LOADED.pop(name, None)


def register_loader(loader: str, load: Callable[[str], Environment]) -> None:
    """Adds (or replaces, for tests) a loader: `<loader>:<source>` names then load."""
    with _LOCK:
        _LOADERS[loader] = load
        for name in [n for n in _LOADED if n.startswith(f"{loader}:")]:
            del _LOADED[name]


def list_environments() -> list[str]:
    """Bundled and plugin environments that loaded (broken ones: broken_environments)."""
    return sorted(environment_sources())


def list_loaders() -> list[str]:
    return sorted(_LOADERS)


def get_environment(name: str) -> Environment:
    """The named environment; raises UnknownEnvironment listing the known names."""
    with _LOCK:
        stamp = _stamp(name)
        cached = _LOADED.get(name)
        # A source gone since (stamp None) keeps serving what was read: running jobs go on.
        if cached is not None and (stamp is None or cached[1] == stamp):
            return cached[0]
        environment = _factory(name)()
        _LOADED[name] = (environment, stamp)
        return environment


def _stamp(name: str) -> Stamp:
    """What says a loader's source file changed since it was read; None for the rest."""
    loader, sep, source = name.partition(":")
    if name in _FACTORIES or name in plugins().loaded or not sep or loader not in _LOADERS:
        return None
    try:
        stat = os.stat(Path(source).expanduser())
    except (OSError, ValueError):  # missing (the loader says so), a name too long, ...
        return None
    return stat.st_mtime_ns, stat.st_size


def _factory(name: str) -> Callable[[], Environment]:
    factory = _FACTORIES.get(name) or _plugin_factory(name)
    if factory is not None:
        return factory
    broken = plugins().broken.get(name)
    if broken is not None:
        raise BrokenEnvironment(broken.describe("environment"))
    loader, sep, source = name.partition(":")
    load = _LOADERS.get(loader) if sep and source else None
    if load is None:
        known = [*environment_sources(), *(f"{key}:<path>" for key in _LOADERS)]
        raise UnknownEnvironment(name, known)
    return lambda: load(source)
