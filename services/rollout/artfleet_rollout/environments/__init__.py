"""Environments (task sets) the agent is trained and evaluated on."""

from .base import (
    SPLITS,
    Environment,
    McpTask,
    Scenario,
    ToolCallSpec,
    UnknownEnvironment,
    UnknownScenario,
    UnknownSplit,
)
from .registry import (
    BrokenEnvironment,
    broken_environments,
    environment_sources,
    get_environment,
    list_environments,
    list_loaders,
    register_environment,
    register_loader,
)
from .shell_tasks import ScenarioDataError, load_shell_tasks, parse_shell_tasks

__all__ = [
    "SPLITS",
    "BrokenEnvironment",
    "Environment",
    "McpTask",
    "Scenario",
    "ScenarioDataError",
    "ToolCallSpec",
    "UnknownEnvironment",
    "UnknownScenario",
    "UnknownSplit",
    "broken_environments",
    "environment_sources",
    "get_environment",
    "list_environments",
    "list_loaders",
    "load_shell_tasks",
    "parse_shell_tasks",
    "register_environment",
    "register_loader",
]
