"""An ART rollout function and its scenarios, as an environment of the fleet.

A package declares one as an `artfleet.environments` entry point:

    # my_pkg/env.py
    from artfleet_rollout.art_environment import ArtEnvironment

    async def rollout(model: art.Model, scenario: dict) -> art.Trajectory: ...   # as for ART

    guess = ArtEnvironment(rollout, scenarios="scenarios.jsonl")

    # pyproject.toml
    [project.entry-points."artfleet.environments"]
    guess = "my_pkg.env:guess"

`scenarios` is a list (dicts or any objects), a JSON/JSONL file (relative paths are read
beside the module that declared it), or a function returning them, as a list or as
`{"train": [...], "test": [...]}` (or a `(train, test)` pair). A scenario's `id` and
`split` (key or attribute) are used when it has them; otherwise ids are its position and
splits follow the loaders' rule (every fifth one is `test`). The rollout function gets the
scenario object itself. The `art` agent kind (agents/kinds/art.py) runs the episodes.

A rollout reaches the fleet's sandboxes and scorers through `artfleet.clients.episode`
(`sandbox()`, `score()`), inside the episode the `art` kind runs it in.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from artfleet.contracts.art_types import art
from artfleet.contracts.records import BadRecord, BadRecords

from .environments import SPLITS, Environment, Scenario
from .environments.loaders import read_records

ART_KIND = "art"
Rollout = Callable[[art.Model, Any], Awaitable[art.Trajectory]]
ScenarioSource = Sequence[Any] | str | Path | Callable[[], Any]
DESCRIBED_CHARS = 2000  # of a scenario, as `envs show` prints it


@dataclass(frozen=True)
class ArtTask:
    """One episode's work: the plugin's rollout function and the user's scenario object."""

    rollout: Rollout
    scenario: Any
    plugin: str  # the environment's name, for errors


@dataclass(frozen=True)
class ArtEnvironment:
    rollout: Rollout
    scenarios: ScenarioSource
    description: str = ""

    def environment(self, name: str) -> Environment:
        located, bad = _located(self.scenarios, self.rollout)
        scenarios: list[Scenario] = []
        seen: set[str] = set()
        for position, (where, split, item) in enumerate(located):
            scenario_id = str(_field(item, "id") or f"scenario-{position:04d}")
            if scenario_id in seen:
                bad.add(BadRecord(where, "duplicate id", repr(scenario_id)))
                continue
            seen.add(scenario_id)
            scenarios.append(
                Scenario(
                    id=scenario_id,
                    split=_split(item, split, position),
                    title=scenario_id,
                    instruction=_describe(item),
                    payload=ArtTask(self.rollout, item, name),
                )
            )
        doc = (inspect.getdoc(self.rollout) or "").splitlines()
        description = self.description or (doc[0] if doc else f"ART rollout {name}")
        return Environment(name, description, scenarios, agent=ART_KIND, bad_records=bad)


Located = tuple[str, str, Any]  # (where, split given by the source or "", scenario)


def _located(source: ScenarioSource, rollout: Rollout) -> tuple[list[Located], BadRecords]:
    bad = BadRecords()
    if isinstance(source, str | Path):
        path = Path(source)
        if not path.is_absolute():  # beside the module that declared the environment
            module = inspect.getmodule(rollout)
            base = Path(module.__file__).parent if module and module.__file__ else Path.cwd()
            path = base / path
        located: list[Located] = []
        for where, record in read_records(str(path)):
            if isinstance(record, BadRecord):
                bad.add(record)
            else:
                located.append((where, "", record))
        return located, bad
    made = source() if callable(source) else source
    if isinstance(made, Mapping):
        return [
            (f"{split}[{i}]", split, s)
            for split in SPLITS
            for i, s in enumerate(made.get(split, ()))
        ], bad
    if isinstance(made, tuple) and len(made) == 2 and all(_is_list(p) for p in made):
        return [
            (f"{split}[{i}]", split, s)
            for split, part in zip(SPLITS, made, strict=True)
            for i, s in enumerate(part)
        ], bad
    if not _is_list(made):
        raise TypeError(
            "scenarios must be a list, a file or a function returning them, "
            f"not {type(made).__name__}"
        )
    return [(f"scenarios[{i}]", "", s) for i, s in enumerate(made)], bad


def _is_list(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, str | bytes | Mapping)


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def _split(item: Any, given: str, position: int) -> str:
    own = _field(item, "split")
    if isinstance(own, str) and own in SPLITS:
        return own
    if given:
        return given
    return "test" if position % 5 == 4 else "train"


def _describe(item: Any) -> str:
    if hasattr(item, "model_dump"):  # a pydantic scenario, as ART examples write them
        item = item.model_dump()
    try:
        text = json.dumps(item, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(item)
    return text[:DESCRIBED_CHARS]
