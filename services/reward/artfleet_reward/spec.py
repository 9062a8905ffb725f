"""A job's reward spec, resolved into scorers. The spec itself (defaults, built-in
params, gates, clips, failure policies) is validated by the shared model
(artfleet.specs.reward); this adds what only the service knows: the scorers its registry
holds (custom entry points included) and its environment (a judge's key variable). Every
mistake raises InvalidSpec naming the field as the job spec spells it
(`reward[1].params.judge.model`, `reward[2].gate.scorer`, `reward_clip`)."""

from __future__ import annotations

from dataclasses import dataclass

from artfleet.specs.base import InvalidSpec
from artfleet.specs.reward import (
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
class Entry:
    """A scorer of the spec (weight, gate, clip, on_error as validated by the shared
    model) and the scorer the registry built from its params."""

    spec: ScorerModel
    scorer: Scorer

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class ResolvedSpec:
    entries: list[Entry]
    clip: RangeModel | None = None  # the spec's reward_clip: bounds of the weighted total
    policy: pb.PolicyEndpoint | None = None

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]


def _entry(spec: ScorerModel, field: str) -> Entry:
    scorers = registry()
    definition = scorers.get(spec.name)
    if definition is None:
        known = ", ".join(sorted(scorers))
        raise InvalidSpec(f"{field}.name", f"unknown scorer {spec.name!r}; known: {known}")
    return Entry(spec, definition.build(spec.params, f"{field}.params"))


def resolve_model(
    spec: RewardSpecModel, policy: pb.PolicyEndpoint | None = None, prefix: str = SPEC_FIELD
) -> ResolvedSpec:
    entries = [_entry(s, f"{prefix}[{i}]") for i, s in enumerate(spec.reward)]
    return ResolvedSpec(entries, spec.reward_clip, policy)


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
