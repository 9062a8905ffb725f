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

A rollout that draws its own task (ART's `rollout(model, step, is_validation)`) needs no
scenarios: the environment then lists `tasks` train slots (`task-0000`, ...) and
`eval_tasks` test slots (`eval-0000`, ...). A job's step takes `groups_per_step` of the
slots (its epochs run over them), each a group of `rollouts_per_group` episodes; an
evaluation runs each test slot `eval_k` times. The function is bound by its signature when
the environment loads (art_shapes): one it cannot be called in makes it broken.

A rollout reaches the fleet's sandboxes and scorers through `artfleet.clients.episode`
(`sandbox()`, `score()`), inside the episode the `art` kind runs it in.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from artfleet.contracts.records import BadRecord, BadRecords

from .art_shapes import ArtEnvironmentError, Rollout, RolloutShape, bind_rollout
from .environments import SPLITS, Environment, Scenario
from .environments.loaders import read_records

ART_KIND = "art"
ScenarioSource = Sequence[Any] | str | Path | Callable[[], Any]
DESCRIBED_CHARS = 2000  # of a scenario, as `envs show` prints it
SLOT_IDS = {"train": "task-{:04d}", "test": "eval-{:04d}"}  # a self-drawn task's slots


@dataclass(frozen=True)
class ArtTask:
    """One episode's work: the plugin's rollout function, how it is called, and the user's
    scenario object (None for a slot: the function draws its own task)."""

    rollout: Rollout
    scenario: Any
    plugin: str  # the environment's name, for errors
    shape: RolloutShape


@dataclass(frozen=True)
class ArtEnvironment:
    """An ART rollout function with its scenarios, or with a count of task slots when it
    draws its own task (`tasks` train slots, `eval_tasks` test slots; see the module)."""

    rollout: Rollout
    scenarios: ScenarioSource | None = None
    description: str = ""
    tasks: int | None = None  # train slots without scenarios (default 1)
    eval_tasks: int | None = None  # test slots without scenarios (default 1)

    def environment(self, name: str) -> Environment:
        shape = bind_rollout(self.rollout, scenarios=self.scenarios is not None, plugin=name)
        doc = (inspect.getdoc(self.rollout) or "").splitlines()
        description = self.description or (doc[0] if doc else f"ART rollout {name}")
        if self.scenarios is None:
            slots = self._slots(name, shape)
            return Environment(name, description, slots, agent=ART_KIND)
        if self.tasks is not None or self.eval_tasks is not None:
            raise ArtEnvironmentError(
                f"{name}: tasks/eval_tasks count the slots of a rollout without scenarios; "
                "this one has scenarios"
            )
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
                    payload=ArtTask(self.rollout, item, name, shape),
                )
            )
        return Environment(name, description, scenarios, agent=ART_KIND, bad_records=bad)

    def _slots(self, name: str, shape: RolloutShape) -> list[Scenario]:
        counts = {"train": self.tasks, "test": self.eval_tasks}
        slots: list[Scenario] = []
        for split, count in counts.items():
            if count is None:
                count = 1
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                field = "tasks" if split == "train" else "eval_tasks"
                raise ArtEnvironmentError(f"{name}: {field} must be a count >= 0, not {count!r}")
            for i in range(count):
                slot = SLOT_IDS[split].format(i)
                what = f"{shape.text} draws its own task ({split} slot {i})"
                payload = ArtTask(self.rollout, None, name, shape)
                slots.append(Scenario(slot, split, slot, what, payload=payload))
        if not any(s.split == "train" for s in slots):
            raise ArtEnvironmentError(f"{name}: tasks must be at least 1 (the train slots)")
        return slots


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
