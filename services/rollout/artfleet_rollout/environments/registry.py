"""Environments by name. Each is loaded once, on first use, and then shared: they are
immutable, so every rollout worker coroutine can read the same instance.

A name is either a bundled environment (`shell-tasks`) or a loader with its source,
`<loader>:<path>` (`jsonl:/data/prompts.jsonl`, `swebench:/data/lite.parquet`): the
loader reads the local file (or a `datasets` dataset saved on disk) at first use, and again
when the file changes (its modification time or size), so a file fixed after the trainer
refused a job for its bad records is read anew, not served from the cache.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from . import bundled_agents, calculator, code_fix, math_single, repo_loaders, shell_tasks
from .base import Environment, UnknownEnvironment
from .loaders import load_hud, load_jsonl

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
    return sorted(_FACTORIES)


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
    if name in _FACTORIES or not sep or loader not in _LOADERS:
        return None
    try:
        stat = os.stat(Path(source).expanduser())
    except (OSError, ValueError):  # missing (the loader says so), a name too long, ...
        return None
    return stat.st_mtime_ns, stat.st_size


def _factory(name: str) -> Callable[[], Environment]:
    factory = _FACTORIES.get(name)
    if factory is not None:
        return factory
    loader, sep, source = name.partition(":")
    load = _LOADERS.get(loader) if sep and source else None
    if load is None:
        raise UnknownEnvironment(name, [*_FACTORIES, *(f"{key}:<path>" for key in _LOADERS)])
    return lambda: load(source)
