"""The built-in scorers' params, one small model each: the reward spec validates them, the
reward service's scorers read them."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    Discriminator,
    Field,
    StrictBool,
    StrictStr,
    Tag,
    model_validator,
)

from artfleet.contracts.env_names import ENV_VAR_NAME
from artfleet.specs.base import (
    FieldError,
    MaxTokens,
    NonEmpty,
    Number,
    Params,
    Positive,
    Temperature,
)

POLICY_JUDGE = "policy"
# The built-in scorers' names, declared here once: the reward service's registry is keyed
# by BUILTIN_PARAMS (it refuses to start with a built-in it does not implement) and its
# scorers take their names from these constants.
PROCESS = "process"
TESTS = "tests"
TASK_CHECK = "task_check"
ROLLOUT_REWARD = "rollout_reward"  # the reward an ART rollout function gave its trajectory
RULER = "ruler"
JUDGE = "judge"
MCP_EVALUATE = "mcp_evaluate"  # the scorer that is an MCP environment's evaluate tool
ANSWER_CHECK = "answer_check"


# ---------------------------------------------------------------- built-in scorers' params


class ProcessParams(Params):
    """The terminal agent's process-reward table; any value may be overridden."""

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
    unknown_key: ClassVar[str] = f"{TASK_CHECK} takes no parameters"


class RolloutRewardParams(Params):
    unknown_key: ClassVar[str] = f"{ROLLOUT_REWARD} takes no parameters"


def _http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http(s) URL")
    return value


def _env_name(value: str) -> str:
    # Keys never travel in a spec: only the name of the variable that holds one.
    if not ENV_VAR_NAME.match(value):
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
    """HUD's form: `{local: {...}}` or `{ssh: {...}}`."""

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
    """With neither `server` nor `mcp_config`, only episodes the MCP agent evaluated in
    their own session can be scored (the others are scorer errors)."""

    server: Command | None = None
    mcp_config: McpConfig | None = None  # wins over `server`
    setup: SetupCall | None = None
    evaluate: EvaluateCall = Field(default_factory=EvaluateCall)
    answer_argument: StrictStr = ""  # the evaluate argument that gets the last answer
    replay: StrictBool = True
    timeout_s: Positive | None = None  # None: the reward service's mcp_timeout_s

    @property
    def has_server(self) -> bool:
        return self.server is not None or self.mcp_config is not None

    @property
    def command(self) -> Command:
        if self.mcp_config is not None:
            return self.mcp_config.command
        if self.server is None:
            raise ValueError("no MCP server configured (server or mcp_config)")
        return self.server


class AnswerCheckParams(Params):
    """The answer check of single-turn tasks: the episode's expected answer (or `answer`)
    against the model's last reply. `exact`: equal after trimming, case and a final period;
    `numeric`: a number in the reply (`pick`: the last, the first, or any) within
    `tolerance` (absolute) or `relative_tolerance`; `regex`: `pattern` (default: the
    expected answer, escaped) is found in the reply."""

    mode: Literal["exact", "numeric", "regex"] = "numeric"
    answer: StrictStr | None = None  # one answer for every scenario; None = the episode's
    tolerance: Annotated[float, Field(ge=0)] = 1e-6
    relative_tolerance: Annotated[float, Field(ge=0)] = 0.0
    pick: Literal["last", "first", "any"] = "last"
    pattern: NonEmpty | None = None
    case_sensitive: StrictBool = False

    @model_validator(mode="after")
    def _pattern_compiles(self) -> AnswerCheckParams:
        if self.pattern is not None:
            import re

            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise FieldError(("pattern",), f"is not a regular expression: {exc}") from None
        return self


# Each built-in scorer's params model; a name missing here would be taken for a custom
# scorer at submit, its params unchecked until the reward service sees them.
BUILTIN_PARAMS: dict[str, type[Params]] = {
    PROCESS: ProcessParams,
    TESTS: TestsParams,
    TASK_CHECK: TaskCheckParams,
    ROLLOUT_REWARD: RolloutRewardParams,
    RULER: RulerParams,
    JUDGE: JudgeParams,
    MCP_EVALUATE: McpEvaluateParams,
    ANSWER_CHECK: AnswerCheckParams,
}
