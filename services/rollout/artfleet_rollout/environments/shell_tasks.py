"""`shell-tasks`: small terminal tasks bundled as YAML (`shell_tasks.yaml`).

The data is validated when it is loaded so a typo fails at start-up, naming the task and
the field, instead of silently producing a task no agent can solve.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .base import SPLITS, Environment, Scenario

NAME = "shell-tasks"
DATA_FILE = "shell_tasks.yaml"

_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_DIFFICULTIES = ("easy", "medium", "hard")
_REQUIRED = ("id", "split", "title", "instruction", "check", "solution")
_OPTIONAL = ("files", "image", "difficulty", "network")


class ScenarioDataError(ValueError):
    """The bundled task data is malformed; the message names the task and field."""


def _check_path(path: Any, where: str) -> str:
    if not isinstance(path, str) or not path:
        raise ScenarioDataError(f"{where}: a file path must be a non-empty string")
    # Workspace files must stay inside the workspace: no absolute paths, no `..`; and one
    # spelling per file, so no `.` segments either.
    if path.startswith("/") or "\\" in path or any(p in ("..", ".") for p in path.split("/")):
        raise ScenarioDataError(f"{where}: {path!r} must be a plain relative path")
    if path.endswith("/") or "//" in path:
        raise ScenarioDataError(f"{where}: {path!r} must name a file")
    return path


def _check_files(files: Any, where: str) -> dict[str, str]:
    if not isinstance(files, dict):
        raise ScenarioDataError(f"{where}: must be a mapping of path to content")
    checked: dict[str, str] = {}
    for path, content in files.items():
        _check_path(path, where)
        if not isinstance(content, str):
            raise ScenarioDataError(f"{where}.{path}: content must be a string (quote it)")
        checked[path] = content
    return checked


def _check_command(value: str, where: str) -> str:
    # A check's status is its last command's: a second line would hide the first's
    # failure, so checks are one line (`&&` chains, `\` continuations).
    if "\n" in value.replace("\\\n", ""):
        raise ScenarioDataError(f"{where}: must be one line; join conditions with &&")
    return value


def _scenario(raw: Any, index: int) -> Scenario:
    where = f"{DATA_FILE}: tasks[{index}]"
    if not isinstance(raw, dict):
        raise ScenarioDataError(f"{where}: must be a mapping")
    where += f" ({raw.get('id', '?')})"
    unknown = set(raw) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        raise ScenarioDataError(f"{where}: unknown keys {sorted(unknown)}")
    for key in _REQUIRED:
        value = raw.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ScenarioDataError(f"{where}.{key}: required, a non-empty string")
    if not _ID.match(raw["id"]):
        raise ScenarioDataError(f"{where}.id: use lowercase letters, digits and '-'")
    if raw["split"] not in SPLITS:
        raise ScenarioDataError(f"{where}.split: must be one of {', '.join(SPLITS)}")
    difficulty = raw.get("difficulty", "")
    network = raw.get("network", False)
    if not isinstance(network, bool):
        raise ScenarioDataError(f"{where}.network: must be true or false")
    if difficulty and difficulty not in _DIFFICULTIES:
        raise ScenarioDataError(f"{where}.difficulty: must be one of {', '.join(_DIFFICULTIES)}")
    return Scenario(
        id=raw["id"],
        split=raw["split"],
        title=raw["title"].strip(),
        instruction=raw["instruction"].strip(),
        files=_check_files(raw.get("files") or {}, f"{where}.files"),
        check=_check_command(raw["check"].strip(), f"{where}.check"),
        image=str(raw.get("image") or ""),
        network=network,
        difficulty=difficulty,
        solution=raw["solution"].strip(),
    )


def parse_shell_tasks(data: Any) -> Environment:
    """Builds the environment from parsed YAML; raises ScenarioDataError on bad data."""
    if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
        raise ScenarioDataError(f"{DATA_FILE}: expected a mapping with a `tasks` list")
    scenarios = [_scenario(raw, i) for i, raw in enumerate(data["tasks"])]
    seen: set[str] = set()
    for i, scenario in enumerate(scenarios):
        if scenario.id in seen:
            raise ScenarioDataError(
                f"{DATA_FILE}: tasks[{i}].id: duplicate task id {scenario.id!r}"
            )
        seen.add(scenario.id)
    return Environment(
        name=str(data.get("name") or NAME),
        description=str(data.get("description") or "").strip(),
        scenarios=scenarios,
    )


def bundled_yaml(data_file: str, path: Path | None) -> Any:
    """The YAML data file bundled with these environments, or `path` instead (tests,
    custom task sets)."""
    source = resources.files(__package__).joinpath(data_file) if path is None else path
    return yaml.safe_load(source.read_text(encoding="utf-8"))


def load_shell_tasks(path: Path | None = None) -> Environment:
    """Loads the bundled data (or `path`, for tests and custom task sets)."""
    return parse_shell_tasks(bundled_yaml(DATA_FILE, path))
