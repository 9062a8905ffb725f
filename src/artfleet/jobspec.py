"""The job spec: defaults, validation with field names, YAML and proto forms.

The trainer validates every SubmitJob with this model, and the CLI uses it to read YAML
files, so both reject the same specs with the same messages.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from artfleet.errors import InvalidArgument
from artfleet.v1 import common_pb2 as pb

DEFAULT_BASE_MODEL = "smollm2-135m-instruct"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


class RangeModel(BaseModel):
    """Clip bounds; a missing side is open."""

    model_config = ConfigDict(extra="forbid")

    min: float | None = Field(default=None, allow_inf_nan=False)
    max: float | None = Field(default=None, allow_inf_nan=False)

    @model_validator(mode="after")
    def _ordered(self) -> RangeModel:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min is above max")
        return self


class GateModel(BaseModel):
    """Score only where an earlier scorer's value is >= min (the rest get 0)."""

    model_config = ConfigDict(extra="forbid")

    scorer: str = Field(min_length=1)
    min: float = Field(default=1.0, allow_inf_nan=False)


OnError = Literal["zero", "drop_trajectory", "drop_group", "fail_job"]


class ScorerModel(BaseModel):
    """One reward scorer. Params are checked by the reward service (Reward.ValidateSpec)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    weight: float = 1.0
    params: dict[str, Any] = Field(default_factory=dict)
    on_error: OnError = "drop_group"
    gate: GateModel | None = None
    clip: RangeModel | None = None


def default_scorers() -> list[ScorerModel]:
    return [ScorerModel(name="process"), ScorerModel(name="task_check")]


class JobSpecModel(BaseModel):
    """What a person submits. Field names match the CLI flags and the YAML keys."""

    model_config = ConfigDict(extra="forbid")

    name: str = "agent"
    project: str = "artfleet"
    base_model: str = DEFAULT_BASE_MODEL
    backend: Literal["torch", "art"] = "torch"
    environment: str = "shell-tasks"
    split: str = "train"
    steps: int = Field(default=3, ge=1, le=100_000)
    groups_per_step: int = Field(default=2, ge=1, le=4096)
    rollouts_per_group: int = Field(default=4, ge=2, le=256)  # GRPO needs >= 2 to compare
    learning_rate: float = Field(default=5e-5, gt=0, le=1.0)
    max_turns: int = Field(default=4, ge=1, le=200)
    seed: int = Field(default=0, ge=0)
    temperature: float = Field(default=0.7, ge=0, le=5.0)  # seed 004's default
    max_tokens: int = Field(default=96, ge=1, le=32_768)
    max_context_tokens: int = Field(default=2048, ge=256, le=1_048_576)
    lora_rank: int = Field(default=8, ge=1, le=512)
    reward: list[ScorerModel] = Field(default_factory=default_scorers)
    reward_clip: RangeModel | None = None  # clips the weighted total
    gather_timeout_s: float = Field(default=900.0, gt=0, le=86_400)
    min_group_fraction: float = Field(default=0.5, gt=0, le=1.0)
    # GPU memory knobs of the art backend (seed 003); None = ART's defaults.
    max_seq_length: int | None = Field(default=None, ge=256, le=1_048_576)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1.0)

    @field_validator("name", "project")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("use 1-63 lowercase letters, digits, '.', '_' or '-'")
        return value


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def validate_spec(data: dict[str, Any]) -> JobSpecModel:
    """Raises InvalidArgument naming the first bad field (e.g. `steps`, `reward[1].name`)."""
    try:
        return JobSpecModel.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidArgument(first["msg"], field=_field_path(tuple(first["loc"]))) from None


def _range_proto(value: RangeModel | None) -> pb.Range | None:
    return None if value is None else pb.Range(min=value.min, max=value.max)


def _scorer_proto(s: ScorerModel) -> pb.ScorerSpec:
    return pb.ScorerSpec(
        name=s.name,
        weight=s.weight,
        params_json=json.dumps(s.params),
        on_error=s.on_error,
        gate=None if s.gate is None else pb.Gate(scorer=s.gate.scorer, min=s.gate.min),
        clip=_range_proto(s.clip),
    )


def spec_to_proto(spec: JobSpecModel) -> pb.JobSpec:
    data = spec.model_dump(exclude={"reward", "reward_clip"})
    reward = pb.RewardSpec(
        scorers=[_scorer_proto(s) for s in spec.reward], clip=_range_proto(spec.reward_clip)
    )
    return pb.JobSpec(**data, reward=reward)


def _range_dict(message: pb.Range) -> dict[str, float]:
    return {side: getattr(message, side) for side in ("min", "max") if message.HasField(side)}


def _scorer_dict(s: pb.ScorerSpec, i: int) -> dict[str, Any]:
    try:
        params = json.loads(s.params_json) if s.params_json else {}
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"not JSON: {exc}", field=f"reward[{i}].params") from None
    data: dict[str, Any] = {"name": s.name, "weight": s.weight or 1.0, "params": params}
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


def spec_from_proto(message: pb.JobSpec) -> JobSpecModel:
    """Unset proto fields (zero values) take the defaults; the rest is validated."""
    data: dict[str, Any] = {}
    for field, value in message.ListFields():
        if field.name == "reward":
            continue
        data[field.name] = value
    scorers = [_scorer_dict(s, i) for i, s in enumerate(message.reward.scorers)]
    if scorers:
        data["reward"] = scorers
    if message.reward.HasField("clip"):
        data["reward_clip"] = _range_dict(message.reward.clip)
    return validate_spec(data)


def reward_spec_proto(spec: JobSpecModel) -> pb.RewardSpec:
    return spec_to_proto(spec).reward
