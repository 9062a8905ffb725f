"""The reward spec, once: the model the CLI, the trainer and the reward service validate
with, its defaults, the built-in scorers' params, and its proto form.

A job spec names its scorers `reward` and the total's bounds `reward_clip`; every error
names the field that way (`reward[1].params.judge.model`, `reward[2].gate.scorer`,
`reward_clip`). The reward service adds what only it can check: scorer names it does not
know (custom scorers are entry points there), custom scorers' params, and whether a
judge's key variable is set in its environment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictStr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from artfleet.errors import InvalidArgument
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
DEFAULT_SCORERS = ("process", "task_check")
POLICY_JUDGE = "policy"


# ---------------------------------------------------------------- errors


class InvalidSpec(InvalidArgument):
    """A reward spec that cannot be used; `field` is its path, e.g. `reward[1].name`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message, field=field)
        self.reason = message


class FieldError(ValueError):
    """A validator's complaint about one of its fields: `loc` continues pydantic's path."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


_MESSAGES = {
    "missing": "is required",
    "extra_forbidden": "unknown key",
    "string_type": "must be a string",
    "string_too_short": "must be a non-empty string",
    "list_type": "must be a list",
    **dict.fromkeys(("float_type", "float_parsing", "finite_number"), "must be a finite number"),
    **dict.fromkeys(("int_type", "int_parsing", "int_from_float"), "must be an integer"),
    **dict.fromkeys(("bool_type", "bool_parsing"), "must be true or false"),
    **dict.fromkeys(("dict_type", "model_type", "model_attributes_type"), "must be an object"),
}
_BOUNDS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}


def _describe(error: Any) -> tuple[tuple[str | int, ...], str]:
    """(path, message) of one pydantic error, in our words."""
    loc = tuple(error["loc"])
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        return loc + cause.loc, cause.message
    if isinstance(cause, ValueError):
        return loc, str(cause)
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "literal_error":
        return loc, f"must be one of: {ctx.get('expected', '')}"
    if kind in _BOUNDS:
        sign, key = _BOUNDS[kind]
        return loc, f"must be {sign} {ctx.get(key)}"
    return loc, _MESSAGES.get(kind, str(error["msg"]))


def field_path(loc: tuple[str | int, ...]) -> str:
    """`("reward", 1, "gate", "scorer")` -> `reward[1].gate.scorer`. Union tags (written
    `(form)`) say which form of a value was read; they are no field and are left out."""
    path = ""
    for part in loc:
        if isinstance(part, str) and part.startswith("("):
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path


def spec_error(exc: ValidationError, prefix: tuple[str | int, ...] = ()) -> InvalidSpec:
    """The first error of a validation, naming its field (after `prefix`)."""
    loc, message = _describe(exc.errors()[0])
    return InvalidSpec(field_path(prefix + loc), message)


def _nested(exc: ValidationError, *prefix: str | int) -> FieldError:
    loc, message = _describe(exc.errors()[0])
    return FieldError(prefix + loc, message)


# ---------------------------------------------------------------- value types


def _within(low: float, high: float, what: str = "") -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if not low <= value <= high:
            raise ValueError(f"must be {what}in [{low:g}, {high:g}]")
        return value

    return check


Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]
NonEmpty = Annotated[str, Field(strict=True, min_length=1)]
Temperature = Annotated[Number, AfterValidator(_within(0, 2))]

MaxTokens = Annotated[int, Field(strict=True), AfterValidator(_within(1, 32768, "an integer "))]


class Strict(BaseModel):
    """Strict values (`true` is no number), frozen, and unknown keys named."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    unknown_key: ClassVar[str] = "unknown key"

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if key not in cls.model_fields:
                    known = ", ".join(sorted(cls.model_fields)) or "none"
                    raise FieldError((str(key),), f"{cls.unknown_key}; known: {known}")
        return data


class Params(Strict):
    """A built-in scorer's params."""

    unknown_key: ClassVar[str] = "unknown parameter"


# ---------------------------------------------------------------- built-in scorers' params


class ProcessParams(Params):
    """The process-reward table (seed 004); any value may be overridden."""

    valid_command: Number = 0.01
    command_succeeds: Number = 0.02
    code_modified: Number = 0.03
    tests_discovered: Number = 0.02
    invalid_format: Number = -0.05
    timeout: Number = -0.02
    all_tests_pass: Number = 1.0
    partial_pass: Number = 0.5  # multiplied by the pass rate


class TestsParams(Params):
    all_pass: Number = 1.0
    partial: Number = 0.5  # multiplied by the pass rate


class TaskCheckParams(Params):
    unknown_key: ClassVar[str] = "task_check takes no parameters"


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http(s) URL")
    return value


def _env_name(value: str) -> str:
    # Keys never travel in a spec: only the name of the variable that holds one.
    if not _ENV_NAME.match(value):
        raise ValueError("must name an environment variable, e.g. OPENAI_API_KEY")
    return value


class JudgeEndpoint(Params):
    """Any OpenAI-compatible endpoint; the key is read from the reward service's env."""

    base_url: Annotated[NonEmpty, AfterValidator(_http_url)]
    model: NonEmpty
    api_key_env: Annotated[NonEmpty, AfterValidator(_env_name)] | None = None


def _judge_form(value: Any) -> str:
    return "(policy)" if value == POLICY_JUDGE else "(endpoint)"


# `judge: policy` (the job's own policy endpoint) or `{base_url, model, api_key_env}`.
Judge = Annotated[
    Annotated[Literal["policy"], Tag("(policy)")] | Annotated[JudgeEndpoint, Tag("(endpoint)")],
    Discriminator(_judge_form),
]
DEFAULT_JUDGE_RUBRIC = (
    "Score 1.0 when the agent fully achieved the user's goal, 0.0 when it made no progress,"
    " and partial credit in between for real progress."
)


class LLMParams(Params):
    judge: Judge
    max_tokens: MaxTokens = 256
    temperature: Temperature = 0.0
    timeout_s: Positive | None = None  # None: the reward service's judge_timeout_s
    # A stricter answer schema; None = on for the policy judge (a small model rambles).
    bounded_output: StrictBool | None = None

    @property
    def bounded(self) -> bool:
        return self.judge == POLICY_JUDGE if self.bounded_output is None else self.bounded_output


class RulerParams(LLMParams):
    rubric: NonEmpty | None = None  # None: ART's RULER rubric
    max_tokens: MaxTokens = 512
    # replace (ART's way): the reward is RULER's term, the rest is `independent_reward`.
    combine: Literal["replace", "add"] = "replace"


class JudgeParams(LLMParams):
    rubric: NonEmpty = DEFAULT_JUDGE_RUBRIC


class Command(Params):
    """A stdio MCP server: a local command, `docker run -i ...` or `ssh host ...`."""

    command: NonEmpty
    args: list[StrictStr] = Field(default_factory=list)
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    cwd: NonEmpty | None = None


class McpConfig(Params):
    """Seed 003's form: `{local: {...}}` or `{ssh: {...}}`."""

    local: Command | None = None
    ssh: Command | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and (len(data) != 1 or next(iter(data)) not in cls.model_fields):
            raise ValueError("must hold exactly one of: local, ssh")
        return data

    @property
    def command(self) -> Command:
        command = self.local or self.ssh
        assert command is not None  # exactly one is set (_known_keys)
        return command


class ToolCall(Params):
    """A tool name, or `{tool, arguments}`."""

    tool: NonEmpty
    arguments: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _name_only(cls, data: Any) -> Any:
        return {"tool": data} if isinstance(data, str) else data


class SetupCall(ToolCall):
    tool: NonEmpty = "setup"


class EvaluateCall(ToolCall):
    tool: NonEmpty = "evaluate"


class McpEvaluateParams(Params):
    server: Command | None = None
    mcp_config: McpConfig | None = None  # wins over `server`
    setup: SetupCall | None = None
    evaluate: EvaluateCall = Field(default_factory=EvaluateCall)
    answer_argument: StrictStr = ""  # the evaluate argument that gets the last answer
    replay: StrictBool = True
    timeout_s: Positive | None = None  # None: the reward service's mcp_timeout_s

    @model_validator(mode="after")
    def _has_server(self) -> McpEvaluateParams:
        if self.server is None and self.mcp_config is None:
            raise FieldError(("server",), "is required (or mcp_config)")
        return self

    @property
    def command(self) -> Command:
        if self.mcp_config is not None:
            return self.mcp_config.command
        assert self.server is not None  # _has_server
        return self.server


BUILTIN_PARAMS: dict[str, type[Params]] = {
    "process": ProcessParams,
    "tests": TestsParams,
    "task_check": TaskCheckParams,
    "ruler": RulerParams,
    "judge": JudgeParams,
    "mcp_evaluate": McpEvaluateParams,
}


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


class GateModel(Strict):
    """Score only where an earlier scorer's (unweighted) value is >= min; the rest get 0."""

    scorer: NonEmpty
    min: Number = DEFAULT_GATE_MIN


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
            raise _nested(exc, "params") from None


def default_scorers() -> list[ScorerModel]:
    return [ScorerModel(name=name) for name in DEFAULT_SCORERS]


class RewardSpecModel(BaseModel):
    """The reward part of a job spec, under the job spec's keys."""

    model_config = ConfigDict(extra="forbid")

    reward: list[ScorerModel] = Field(default_factory=default_scorers)
    reward_clip: RangeModel | None = None  # clips the weighted total

    @field_validator("reward")
    @classmethod
    def _order(cls, scorers: list[ScorerModel]) -> list[ScorerModel]:
        earlier: list[str] = []
        for i, scorer in enumerate(scorers):
            if scorer.name in earlier:
                # Components are keyed by scorer name: a second entry would overwrite the first.
                raise FieldError((i, "name"), f"scorer {scorer.name!r} is listed twice")
            if scorer.gate is not None and scorer.gate.scorer not in earlier:
                listed = ", ".join(earlier) or "none"
                raise FieldError(
                    (i, "gate", "scorer"),
                    f"{scorer.gate.scorer!r} is not a scorer listed before this one"
                    f" (listed: {listed})",
                )
            earlier.append(scorer.name)
        return scorers


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
