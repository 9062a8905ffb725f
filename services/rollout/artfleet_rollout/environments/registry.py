"""Environments by name. Each is loaded once, on first use, and then shared: they are
immutable, so every rollout worker coroutine can read the same instance."""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import shell_tasks
from .base import Environment, UnknownEnvironment

_FACTORIES: dict[str, Callable[[], Environment]] = {
    shell_tasks.NAME: shell_tasks.load_shell_tasks,
}
_LOADED: dict[str, Environment] = {}
_LOCK = threading.Lock()  # Celery may run threads; load each environment exactly once


def register_environment(name: str, factory: Callable[[], Environment]) -> None:
    """Adds (or replaces, for tests) an environment factory."""
    with _LOCK:
        _FACTORIES[name] = factory
        _LOADED.pop(name, None)


def list_environments() -> list[str]:
    return sorted(_FACTORIES)


def get_environment(name: str) -> Environment:
    """The named environment; raises UnknownEnvironment listing the known names."""
    with _LOCK:
        if name in _LOADED:
            return _LOADED[name]
        factory = _FACTORIES.get(name)
        if factory is None:
            raise UnknownEnvironment(name, _FACTORIES)
        environment = _LOADED[name] = factory()
        return environment
