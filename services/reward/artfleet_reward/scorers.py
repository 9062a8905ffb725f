"""Reward math (pure, no I/O): the process-reward table, the task check, and weighted
combinations of named scorers as a job's reward spec asks for them.

Process rewards follow the terminal-agent table our users know (seed README):

| event              | reward           |   | event          | reward            |
| valid bash command | +0.01            |   | invalid format | -0.05             |
| command succeeds   | +0.02            |   | timeout        | -0.02             |
| code modified      | +0.03            |   | all tests pass | +1.0              |
| tests discovered   | +0.02            |   | partial pass   | +0.5 x pass_rate  |

Decisions the table leaves open, made here:
- A `submit` step has a valid format but is not a bash command: it earns nothing (and
  costs nothing). Otherwise ending the episode early would be rewarded like work.
- "Command succeeds" needs the command to have run (`executed`), exit 0 and no timeout:
  an unexecuted step's exit code is the proto default 0 and proves nothing.
- An invalid-format step earns only its penalty: nothing ran, so no other row applies.
- The test rows apply once per episode and only when tests ran (`total > 0`). All pass
  gives +1.0 (not 1.0 + 0.5); otherwise +0.5 x passed / total.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from artfleet.errors import InvalidArgument
from artfleet.v1 import common_pb2

Episode = common_pb2.Episode
ScoreFn = Callable[[Episode], float]

DEFAULT_SCORERS = ("process", "task_check")
SPEC_FIELD = "reward"  # job specs name the list `reward` (see artfleet.jobspec)


class InvalidSpec(InvalidArgument):
    """A reward spec the service cannot use; `field` is its path, e.g. `reward[1].name`.

    It is an `InvalidArgument`, so the shared interceptor maps it to INVALID_ARGUMENT too.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)
        self.reason = message


class ScorerFailed(Exception):
    """A scorer raised or returned a non-finite value; `scorer` names it for metrics."""

    def __init__(self, scorer: str, message: str) -> None:
        super().__init__(f"scorer {scorer!r} failed: {message}")
        self.scorer = scorer


@dataclass(frozen=True)
class ProcessRewardTable:
    """The process-reward values; a scorer's `params` may override any of them."""

    valid_command: float = 0.01
    command_succeeds: float = 0.02
    code_modified: float = 0.03
    tests_discovered: float = 0.02
    invalid_format: float = -0.05
    timeout: float = -0.02
    all_tests_pass: float = 1.0
    partial_pass: float = 0.5  # multiplied by the pass rate


DEFAULT_PROCESS_TABLE = ProcessRewardTable()


def step_reward(
    step: common_pb2.StepEvent, table: ProcessRewardTable = DEFAULT_PROCESS_TABLE
) -> float:
    if not step.valid_format:
        return table.invalid_format
    reward = 0.0
    if not step.is_submit:
        reward += table.valid_command
    if step.executed and not step.timed_out and step.exit_code == 0:
        reward += table.command_succeeds
    if step.code_modified:
        reward += table.code_modified
    if step.tests_discovered:
        reward += table.tests_discovered
    if step.timed_out:
        reward += table.timeout
    return reward


def tests_reward(
    tests: common_pb2.TestSummary, table: ProcessRewardTable = DEFAULT_PROCESS_TABLE
) -> float:
    # `total` should be set; if a producer only filled the counts, they still say enough.
    total = max(tests.total, tests.passed + tests.failed + tests.errored)
    if total <= 0:
        return 0.0
    if tests.passed >= total:
        return table.all_tests_pass
    return table.partial_pass * (tests.passed / total)


def process_reward(episode: Episode, table: ProcessRewardTable = DEFAULT_PROCESS_TABLE) -> float:
    """Σ per-step rewards + the episode's test reward (seed-004 table)."""
    return sum(step_reward(s, table) for s in episode.steps) + tests_reward(episode.tests, table)


def task_check_reward(episode: Episode) -> float:
    """1.0 when the scenario's check passed after the episode, else 0.0."""
    return 1.0 if episode.check_passed else 0.0


# ---------------------------------------------------------------- registry


def _number(value: Any, field: str) -> float:
    # bool is an int in Python; `true` as a reward value is a mistake, not 1.0.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidSpec(field, "must be a finite number")
    return float(value)


def _configure_process(params: Mapping[str, Any], field: str) -> ScoreFn:
    known = {f.name for f in fields(ProcessRewardTable)}
    overrides = {}
    for key, value in params.items():
        if key not in known:
            raise InvalidSpec(
                f"{field}.{key}", f"unknown parameter; known: {', '.join(sorted(known))}"
            )
        overrides[key] = _number(value, f"{field}.{key}")
    table = replace(DEFAULT_PROCESS_TABLE, **overrides)
    return lambda episode: process_reward(episode, table)


def _configure_task_check(params: Mapping[str, Any], field: str) -> ScoreFn:
    if params:
        raise InvalidSpec(f"{field}.{next(iter(params))}", "task_check takes no parameters")
    return task_check_reward


@dataclass(frozen=True)
class ScorerDef:
    name: str
    description: str
    # Validates the spec's params (raising InvalidSpec naming the field) and returns the
    # scoring function, so a bad spec fails before any episode is scored.
    configure: Callable[[Mapping[str, Any], str], ScoreFn]


SCORERS: dict[str, ScorerDef] = {
    d.name: d
    for d in (
        ScorerDef("process", "per-step process rewards + test pass rate", _configure_process),
        ScorerDef("task_check", "1.0 when the scenario's check passed", _configure_task_check),
    )
}


@dataclass(frozen=True)
class ConfiguredScorer:
    name: str
    weight: float
    score: ScoreFn


@dataclass(frozen=True)
class EpisodeScore:
    """Mirrors `artfleet.v1.TrajectoryScore`: the weighted total and each unweighted part."""

    reward: float
    components: dict[str, float]


def _params(spec: common_pb2.ScorerSpec, field: str) -> dict[str, Any]:
    if not spec.params_json.strip():
        return {}
    try:
        params = json.loads(spec.params_json)
    except json.JSONDecodeError as exc:
        raise InvalidSpec(field, f"not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise InvalidSpec(field, "must be a JSON object")
    return params


def resolve_spec(
    spec: common_pb2.RewardSpec | None, prefix: str = SPEC_FIELD
) -> list[ConfiguredScorer]:
    """Validates a reward spec; an empty one means the default [process, task_check]."""
    entries = list(spec.scorers) if spec is not None else []
    if not entries:
        return [ConfiguredScorer(n, 1.0, SCORERS[n].configure({}, "")) for n in DEFAULT_SCORERS]
    resolved: list[ConfiguredScorer] = []
    for i, entry in enumerate(entries):
        field = f"{prefix}[{i}]"
        definition = SCORERS.get(entry.name)
        if definition is None:
            known = ", ".join(sorted(SCORERS))
            raise InvalidSpec(f"{field}.name", f"unknown scorer {entry.name!r}; known: {known}")
        if any(r.name == entry.name for r in resolved):
            # Components are keyed by scorer name: a second entry would overwrite the first.
            raise InvalidSpec(f"{field}.name", f"scorer {entry.name!r} is listed twice")
        weight = _number(entry.weight, f"{field}.weight") or 1.0  # proto3: 0 = unset = 1.0
        score = definition.configure(_params(entry, f"{field}.params"), f"{field}.params")
        resolved.append(ConfiguredScorer(entry.name, weight, score))
    return resolved


def score_episode(scorers: Sequence[ConfiguredScorer], episode: Episode) -> EpisodeScore:
    """reward = Σ weight × value; raises ScorerFailed rather than train on a bad number."""
    components: dict[str, float] = {}
    for scorer in scorers:
        try:
            value = float(scorer.score(episode))
        except Exception as exc:
            raise ScorerFailed(scorer.name, f"{type(exc).__name__}: {exc}") from exc
        if not math.isfinite(value):
            raise ScorerFailed(scorer.name, f"returned {value}")
        components[scorer.name] = value
    reward = sum(s.weight * components[s.name] for s in scorers)
    return EpisodeScore(reward=reward, components=components)


def score_group(
    spec: common_pb2.RewardSpec | None, episodes: Sequence[Episode]
) -> list[EpisodeScore]:
    """Scores each episode of a group with the spec's scorers (the default when empty)."""
    scorers = resolve_spec(spec)
    return [score_episode(scorers, episode) for episode in episodes]
