"""A job's reward spec, resolved into scorers. The spec itself (defaults, built-in
params, gates, clips, failure policies) is validated by the shared model
(artfleet.specs.reward); this adds what only the service knows: the scorers its registry
holds (custom entry points included) and its environment (a judge's key variable). Every
mistake raises InvalidSpec naming the field as the job spec spells it
(`reward[1].params.judge.model`, `reward[2].gate.scorer`, `reward_clip`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from artfleet.specs.base import InvalidSpec
from artfleet.specs.reward import (
    DEFAULT_GATE_MIN,
    DEFAULT_ON_ERROR,
    SPEC_FIELD,
    RangeModel,
    RewardSpecModel,
    ScorerModel,
    reward_from_proto,
)
from artfleet.v1 import common_pb2 as pb

from .scorers import registry
from .scorers.base import Scorer


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
    weight: float  # 0: computed and logged, not counted
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


def _clip(value: RangeModel | None) -> Clip | None:
    return None if value is None else Clip(value.min, value.max)


def _entry(spec: ScorerModel, field: str) -> Entry:
    scorers = registry()
    definition = scorers.get(spec.name)
    if definition is None:
        known = ", ".join(sorted(scorers))
        raise InvalidSpec(f"{field}.name", f"unknown scorer {spec.name!r}; known: {known}")
    gate = spec.gate
    return Entry(
        name=spec.name,
        weight=spec.weight,
        scorer=definition.build(spec.params, f"{field}.params"),
        on_error=spec.on_error,
        gate=None if gate is None else Gate(gate.scorer, gate.min),
        clip=_clip(spec.clip),
    )


def resolve_model(
    spec: RewardSpecModel, policy: pb.PolicyEndpoint | None = None, prefix: str = SPEC_FIELD
) -> ResolvedSpec:
    entries = [_entry(s, f"{prefix}[{i}]") for i, s in enumerate(spec.reward)]
    return ResolvedSpec(entries, _clip(spec.reward_clip), policy)


def resolve_spec(spec: pb.RewardSpec | None, prefix: str = SPEC_FIELD) -> ResolvedSpec:
    """Validates a reward spec; an empty scorer list means the default [process, task_check]."""
    if spec is None:
        spec = pb.RewardSpec()
    try:
        model = reward_from_proto(spec)
    except InvalidSpec as exc:
        if prefix == SPEC_FIELD or not exc.field.startswith(f"{SPEC_FIELD}["):
            raise
        raise InvalidSpec(prefix + exc.field.removeprefix(SPEC_FIELD), exc.reason) from None
    policy = spec.policy if spec.HasField("policy") else None
    return resolve_model(model, policy, prefix)
