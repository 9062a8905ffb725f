"""The reward spec, once: the model the CLI, the trainer and the reward service validate
with, its defaults and its proto form. The built-in scorers' params are small models in
`artfleet.specs.scorer_params`; errors and strict value types come from `artfleet.specs.base`.

A job spec names its scorers `reward` and the total's bounds `reward_clip`; every error
names the field that way (`reward[1].params.judge.model`, `reward[2].gate.scorer`,
`reward_clip`). The reward service adds what only it can check: scorer names it does not
know (custom scorers are entry points there), custom scorers' params, and whether a
judge's key variable is set in its environment.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    ValidationError,
    model_validator,
)

from artfleet.specs.base import (
    FieldError,
    InvalidSpec,
    NonEmpty,
    Number,
    Params,
    Strict,
    nested_error,
    spec_error,
)
from artfleet.specs.scorer_params import (
    BUILTIN_PARAMS,
    MCP_EVALUATE,
    PROCESS,
    ROLLOUT_REWARD,
    TASK_CHECK,
)
from artfleet.v1 import common_pb2 as pb

SPEC_FIELD, CLIP_FIELD = "reward", "reward_clip"  # the job spec's keys
OnError = Literal["zero", "drop_trajectory", "drop_group", "fail_job"]
ZERO: OnError = "zero"
DROP_TRAJECTORY: OnError = "drop_trajectory"
DROP_GROUP: OnError = "drop_group"
FAIL_JOB: OnError = "fail_job"
ON_ERROR: tuple[OnError, ...] = (ZERO, DROP_TRAJECTORY, DROP_GROUP, FAIL_JOB)
# ART's habit: a group whose judge failed is left out of the step (ruler_score_group with
# swallow_exceptions returns None) rather than trained on made-up rewards.
DEFAULT_ON_ERROR: OnError = DROP_GROUP
DEFAULT_WEIGHT = 1.0  # 0 is a real weight: computed and logged, not counted
DEFAULT_GATE_MIN = 1.0  # e.g. "tests all pass"
DEFAULT_SCORERS = (PROCESS, TASK_CHECK)
# An agent kind whose environment scores itself: a job of it with no `reward` key is
# scored so (HUD's habit: the MCP environment's own evaluate tool is the reward; ART's: the
# rollout function sets trajectory.reward).
AGENT_DEFAULT_SCORERS = {"mcp": (MCP_EVALUATE,), "art": (ROLLOUT_REWARD,)}


# ---------------------------------------------------------------- the spec


class RangeModel(Strict):
    """Bounds of a value; a missing side is open."""

    min: Number | None = None
    max: Number | None = None

    @model_validator(mode="after")
    def _ordered(self) -> RangeModel:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        return self

    def clamp(self, value: float) -> float:
        """`value` within the bounds (a scorer's value, or the weighted total)."""
        if self.min is not None:
            value = max(self.min, value)
        if self.max is not None:
            value = min(self.max, value)
        return value


class GateModel(Strict):
    """Score only where an earlier scorer's (unweighted) value is >= min; the rest get 0."""

    scorer: NonEmpty
    min: Number = DEFAULT_GATE_MIN

    def passes(self, components: Mapping[str, float]) -> bool:
        """Whether the gating scorer's unweighted value (absent: not scored) reaches min."""
        return components.get(self.scorer, -math.inf) >= self.min


def _scorer_name(name: str) -> str:
    if not name:
        known = ", ".join(sorted(BUILTIN_PARAMS))
        raise ValueError(f"must name a scorer; known: {known}, or a custom scorer")
    return name


class ScorerModel(Strict):
    """One scorer. `params` stay as written; a built-in's are checked against its model
    (`options()` gives them typed, defaults filled in)."""

    name: Annotated[StrictStr, AfterValidator(_scorer_name)]
    weight: Number = DEFAULT_WEIGHT
    params: dict[str, Any] = Field(default_factory=dict)
    on_error: OnError = DEFAULT_ON_ERROR
    gate: GateModel | None = None
    clip: RangeModel | None = None

    @model_validator(mode="after")
    def _check_params(self) -> ScorerModel:
        self.options()
        return self

    def options(self) -> Params | None:
        """The typed params of a built-in scorer; None for a custom one."""
        model = BUILTIN_PARAMS.get(self.name)
        if model is None:
            return None
        try:
            return model.model_validate(self.params)
        except ValidationError as exc:
            raise nested_error(exc, "params") from None


def default_scorers(agent: str = "") -> list[ScorerModel]:
    """The scorers of a spec without `reward`, for an environment of this agent kind."""
    return [ScorerModel(name=name) for name in AGENT_DEFAULT_SCORERS.get(agent, DEFAULT_SCORERS)]


def _listed_in_order(scorers: list[ScorerModel]) -> list[ScorerModel]:
    earlier: list[str] = []
    for i, scorer in enumerate(scorers):
        if scorer.name in earlier:
            # Components are keyed by scorer name: a second entry would overwrite the first.
            raise FieldError((i, "name"), f"scorer {scorer.name!r} is listed twice")
        if scorer.gate is not None and scorer.gate.scorer not in earlier:
            listed = ", ".join(earlier) or "none"
            raise FieldError(
                (i, "gate", "scorer"),
                f"{scorer.gate.scorer!r} is not a scorer listed before this one (listed: {listed})",
            )
        earlier.append(scorer.name)
    return scorers


# The scorers in order: names unique, a gate naming only a scorer listed before it.
Scorers = Annotated[list[ScorerModel], AfterValidator(_listed_in_order)]


class RewardSpecModel(BaseModel):
    """The reward spec: the scorers (`reward`) and the bounds of their weighted total
    (`reward_clip`), under the keys a job spec gives them. A job spec has one
    (`JobSpecModel.reward_spec`) and declares its two keys with these fields."""

    model_config = ConfigDict(extra="forbid")

    reward: Scorers = Field(default_factory=default_scorers)
    reward_clip: RangeModel | None = Field(default=None, description="clips the weighted total")


def validate_reward(data: dict[str, Any]) -> RewardSpecModel:
    """Raises InvalidSpec naming the first bad field."""
    try:
        return RewardSpecModel.model_validate(data)
    except ValidationError as exc:
        raise spec_error(exc) from None


# ---------------------------------------------------------------- proto form


def range_to_proto(value: RangeModel | None) -> pb.Range | None:
    return None if value is None else pb.Range(min=value.min, max=value.max)


def scorer_to_proto(s: ScorerModel) -> pb.ScorerSpec:
    return pb.ScorerSpec(
        name=s.name,
        weight=s.weight,  # always present: 0 stays 0
        params_json=json.dumps(s.params),
        on_error=s.on_error,
        gate=None if s.gate is None else pb.Gate(scorer=s.gate.scorer, min=s.gate.min),
        clip=range_to_proto(s.clip),
    )


def reward_to_proto(spec: RewardSpecModel) -> pb.RewardSpec:
    return pb.RewardSpec(
        scorers=[scorer_to_proto(s) for s in spec.reward], clip=range_to_proto(spec.reward_clip)
    )


def _range_dict(message: pb.Range) -> dict[str, float]:
    return {side: getattr(message, side) for side in ("min", "max") if message.HasField(side)}


def _params(s: pb.ScorerSpec, field: str) -> Any:
    if not s.params_json.strip():
        return {}
    try:
        params = json.loads(s.params_json)
    except json.JSONDecodeError as exc:
        raise InvalidSpec(field, f"not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise InvalidSpec(field, "must be a JSON object")
    return params


def _scorer_dict(s: pb.ScorerSpec, field: str) -> dict[str, Any]:
    """Unset fields are left out, so the model's defaults apply."""
    data: dict[str, Any] = {"name": s.name, "params": _params(s, f"{field}.params")}
    if s.HasField("weight"):
        data["weight"] = s.weight
    if s.on_error:
        data["on_error"] = s.on_error
    if s.HasField("gate"):
        gate: dict[str, Any] = {"scorer": s.gate.scorer}
        if s.gate.HasField("min"):
            gate["min"] = s.gate.min
        data["gate"] = gate
    if s.HasField("clip"):
        data["clip"] = _range_dict(s.clip)
    return data


def reward_data_from_proto(message: pb.RewardSpec) -> dict[str, Any]:
    """The spec as data for `RewardSpecModel` (or a job spec); an empty scorer list means
    the defaults. Raises InvalidSpec for params that are not a JSON object."""
    data: dict[str, Any] = {}
    scorers = [_scorer_dict(s, f"{SPEC_FIELD}[{i}]") for i, s in enumerate(message.scorers)]
    if scorers:
        data[SPEC_FIELD] = scorers
    if message.HasField("clip"):
        data[CLIP_FIELD] = _range_dict(message.clip)
    return data


def reward_from_proto(message: pb.RewardSpec) -> RewardSpecModel:
    return validate_reward(reward_data_from_proto(message))
