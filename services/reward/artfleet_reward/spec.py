"""A job's reward spec, checked and resolved: which scorers, their weights, gates, clips
and failure policies. Every mistake raises InvalidSpec naming the field as the job spec
spells it (`reward[1].params.judge.model`, `reward[2].gate.scorer`, `reward_clip`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from artfleet.v1 import common_pb2 as pb

from .scorers import registry
from .scorers.base import InvalidSpec, Scorer, number

DEFAULT_SCORERS = ("process", "task_check")
SPEC_FIELD = "reward"  # job specs name the list `reward` (see artfleet.jobspec)
TOTAL_CLIP_FIELD = "reward_clip"

ZERO, DROP_TRAJECTORY, DROP_GROUP, FAIL_JOB = "zero", "drop_trajectory", "drop_group", "fail_job"
ON_ERROR = (ZERO, DROP_TRAJECTORY, DROP_GROUP, FAIL_JOB)
# ART's habit: a group whose judge failed is left out of the step (ruler_score_group with
# swallow_exceptions returns None) rather than trained on made-up rewards.
DEFAULT_ON_ERROR = DROP_GROUP
DEFAULT_GATE_MIN = 1.0


@dataclass(frozen=True)
class Clip:
    low: float | None = None
    high: float | None = None

    def __call__(self, value: float) -> float:
        if self.low is not None:
            value = max(self.low, value)
        if self.high is not None:
            value = min(self.high, value)
        return value


@dataclass(frozen=True)
class Gate:
    scorer: str
    min: float = DEFAULT_GATE_MIN

    def passes(self, components: dict[str, float]) -> bool:
        return components.get(self.scorer, -math.inf) >= self.min


@dataclass(frozen=True)
class Entry:
    name: str
    weight: float
    scorer: Scorer
    on_error: str = DEFAULT_ON_ERROR
    gate: Gate | None = None
    clip: Clip | None = None


@dataclass(frozen=True)
class ResolvedSpec:
    entries: list[Entry]
    clip: Clip | None = None
    policy: pb.PolicyEndpoint | None = None

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]


def _params(spec: pb.ScorerSpec, field: str) -> dict[str, Any]:
    if not spec.params_json.strip():
        return {}
    try:
        params = json.loads(spec.params_json)
    except json.JSONDecodeError as exc:
        raise InvalidSpec(field, f"not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise InvalidSpec(field, "must be a JSON object")
    return params


def _clip(message: pb.Range, field: str) -> Clip:
    low = number(message.min, f"{field}.min") if message.HasField("min") else None
    high = number(message.max, f"{field}.max") if message.HasField("max") else None
    if low is not None and high is not None and low > high:
        raise InvalidSpec(field, f"min {low:g} is above max {high:g}")
    return Clip(low, high)


def _gate(message: pb.Gate, field: str, earlier: list[str]) -> Gate:
    if message.scorer not in earlier:
        listed = ", ".join(earlier) or "none"
        raise InvalidSpec(
            f"{field}.scorer",
            f"{message.scorer!r} is not a scorer listed before this one (listed: {listed})",
        )
    low = number(message.min, f"{field}.min") if message.HasField("min") else DEFAULT_GATE_MIN
    return Gate(message.scorer, low)


def _entry(spec: pb.ScorerSpec, field: str, earlier: list[str]) -> Entry:
    scorers = registry()
    definition = scorers.get(spec.name)
    if definition is None:
        known = ", ".join(sorted(scorers))
        raise InvalidSpec(f"{field}.name", f"unknown scorer {spec.name!r}; known: {known}")
    if spec.name in earlier:
        # Components are keyed by scorer name: a second entry would overwrite the first.
        raise InvalidSpec(f"{field}.name", f"scorer {spec.name!r} is listed twice")
    weight = number(spec.weight, f"{field}.weight") or 1.0  # proto3: 0 = unset = 1.0
    on_error = spec.on_error or DEFAULT_ON_ERROR
    if on_error not in ON_ERROR:
        raise InvalidSpec(f"{field}.on_error", f"must be one of: {', '.join(ON_ERROR)}")
    scorer = definition.configure(_params(spec, f"{field}.params"), f"{field}.params")
    return Entry(
        name=spec.name,
        weight=weight,
        scorer=scorer,
        on_error=on_error,
        gate=_gate(spec.gate, f"{field}.gate", earlier) if spec.HasField("gate") else None,
        clip=_clip(spec.clip, f"{field}.clip") if spec.HasField("clip") else None,
    )


def resolve_spec(spec: pb.RewardSpec | None, prefix: str = SPEC_FIELD) -> ResolvedSpec:
    """Validates a reward spec; an empty scorer list means the default [process, task_check]."""
    if spec is None:
        spec = pb.RewardSpec()
    messages = list(spec.scorers) or [pb.ScorerSpec(name=n) for n in DEFAULT_SCORERS]
    entries: list[Entry] = []
    for i, message in enumerate(messages):
        entries.append(_entry(message, f"{prefix}[{i}]", [e.name for e in entries]))
    clip = _clip(spec.clip, TOTAL_CLIP_FIELD) if spec.HasField("clip") else None
    policy = spec.policy if spec.HasField("policy") else None
    return ResolvedSpec(entries, clip, policy)
