import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLING: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]

class EventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_KIND_UNSPECIFIED: _ClassVar[EventKind]
    EVENT_KIND_STATE: _ClassVar[EventKind]
    EVENT_KIND_STEP_STARTED: _ClassVar[EventKind]
    EVENT_KIND_STEP_DONE: _ClassVar[EventKind]
    EVENT_KIND_LOG: _ClassVar[EventKind]
    EVENT_KIND_EVAL: _ClassVar[EventKind]
    EVENT_KIND_SFT: _ClassVar[EventKind]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLING: JobState
JOB_STATE_CANCELLED: JobState
EVENT_KIND_UNSPECIFIED: EventKind
EVENT_KIND_STATE: EventKind
EVENT_KIND_STEP_STARTED: EventKind
EVENT_KIND_STEP_DONE: EventKind
EVENT_KIND_LOG: EventKind
EVENT_KIND_EVAL: EventKind
EVENT_KIND_SFT: EventKind

class TopLogprob(_message.Message):
    __slots__ = ("token", "logprob", "bytes")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    token: str
    logprob: float
    bytes: bytes
    def __init__(self, token: _Optional[str] = ..., logprob: _Optional[float] = ..., bytes: _Optional[bytes] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token", "logprob", "bytes", "top_logprobs")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token: str
    logprob: float
    bytes: bytes
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, token: _Optional[str] = ..., logprob: _Optional[float] = ..., bytes: _Optional[bytes] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "type", "function_name", "function_arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    function_name: str
    function_arguments: str
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., function_name: _Optional[str] = ..., function_arguments: _Optional[str] = ...) -> None: ...

class Scalar(_message.Message):
    __slots__ = ("float_value", "int_value", "bool_value", "string_value", "null_value")
    FLOAT_VALUE_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    BOOL_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    NULL_VALUE_FIELD_NUMBER: _ClassVar[int]
    float_value: float
    int_value: int
    bool_value: bool
    string_value: str
    null_value: bool
    def __init__(self, float_value: _Optional[float] = ..., int_value: _Optional[int] = ..., bool_value: _Optional[bool] = ..., string_value: _Optional[str] = ..., null_value: _Optional[bool] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "has_tool_calls", "tool_calls", "tool_call_id", "name", "extra_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    HAS_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    has_tool_calls: bool
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    name: str
    extra_json: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., has_tool_calls: _Optional[bool] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., name: _Optional[str] = ..., extra_json: _Optional[str] = ...) -> None: ...

class Choice(_message.Message):
    __slots__ = ("index", "finish_reason", "message", "has_logprobs", "logprobs", "has_token_ids", "prompt_token_ids", "token_ids")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HAS_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    HAS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    index: int
    finish_reason: str
    message: ChatMessage
    has_logprobs: bool
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    has_token_ids: bool
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, index: _Optional[int] = ..., finish_reason: _Optional[str] = ..., message: _Optional[_Union[ChatMessage, _Mapping]] = ..., has_logprobs: _Optional[bool] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ..., has_token_ids: _Optional[bool] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class MessageOrChoice(_message.Message):
    __slots__ = ("message", "choice")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    message: ChatMessage
    choice: Choice
    def __init__(self, message: _Optional[_Union[ChatMessage, _Mapping]] = ..., choice: _Optional[_Union[Choice, _Mapping]] = ...) -> None: ...

class History(_message.Message):
    __slots__ = ("messages_and_choices", "tools_json")
    MESSAGES_AND_CHOICES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    messages_and_choices: _containers.RepeatedCompositeFieldContainer[MessageOrChoice]
    tools_json: str
    def __init__(self, messages_and_choices: _Optional[_Iterable[_Union[MessageOrChoice, _Mapping]]] = ..., tools_json: _Optional[str] = ...) -> None: ...

class Trajectory(_message.Message):
    __slots__ = ("messages_and_choices", "tools_json", "additional_histories", "reward", "initial_policy_version", "final_policy_version", "metrics", "metadata", "logs", "start_time")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Scalar
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Scalar, _Mapping]] = ...) -> None: ...
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Scalar
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Scalar, _Mapping]] = ...) -> None: ...
    MESSAGES_AND_CHOICES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    ADDITIONAL_HISTORIES_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    INITIAL_POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    FINAL_POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    messages_and_choices: _containers.RepeatedCompositeFieldContainer[MessageOrChoice]
    tools_json: str
    additional_histories: _containers.RepeatedCompositeFieldContainer[History]
    reward: float
    initial_policy_version: int
    final_policy_version: int
    metrics: _containers.MessageMap[str, Scalar]
    metadata: _containers.MessageMap[str, Scalar]
    logs: _containers.RepeatedScalarFieldContainer[str]
    start_time: _timestamp_pb2.Timestamp
    def __init__(self, messages_and_choices: _Optional[_Iterable[_Union[MessageOrChoice, _Mapping]]] = ..., tools_json: _Optional[str] = ..., additional_histories: _Optional[_Iterable[_Union[History, _Mapping]]] = ..., reward: _Optional[float] = ..., initial_policy_version: _Optional[int] = ..., final_policy_version: _Optional[int] = ..., metrics: _Optional[_Mapping[str, Scalar]] = ..., metadata: _Optional[_Mapping[str, Scalar]] = ..., logs: _Optional[_Iterable[str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RolloutException(_message.Message):
    __slots__ = ("type", "message", "traceback", "frames", "episodes", "request_id")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    type: str
    message: str
    traceback: str
    frames: _containers.RepeatedScalarFieldContainer[str]
    episodes: int
    request_id: str
    def __init__(self, type: _Optional[str] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ..., frames: _Optional[_Iterable[str]] = ..., episodes: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class TrajectoryGroup(_message.Message):
    __slots__ = ("trajectories", "exceptions", "metadata", "metrics", "logs")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Scalar
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Scalar, _Mapping]] = ...) -> None: ...
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Scalar
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Scalar, _Mapping]] = ...) -> None: ...
    TRAJECTORIES_FIELD_NUMBER: _ClassVar[int]
    EXCEPTIONS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    trajectories: _containers.RepeatedCompositeFieldContainer[Trajectory]
    exceptions: _containers.RepeatedCompositeFieldContainer[RolloutException]
    metadata: _containers.MessageMap[str, Scalar]
    metrics: _containers.MessageMap[str, Scalar]
    logs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, trajectories: _Optional[_Iterable[_Union[Trajectory, _Mapping]]] = ..., exceptions: _Optional[_Iterable[_Union[RolloutException, _Mapping]]] = ..., metadata: _Optional[_Mapping[str, Scalar]] = ..., metrics: _Optional[_Mapping[str, Scalar]] = ..., logs: _Optional[_Iterable[str]] = ...) -> None: ...

class StepEvent(_message.Message):
    __slots__ = ("turn", "valid_format", "is_submit", "executed", "exit_code", "timed_out", "code_modified", "tests_discovered")
    TURN_FIELD_NUMBER: _ClassVar[int]
    VALID_FORMAT_FIELD_NUMBER: _ClassVar[int]
    IS_SUBMIT_FIELD_NUMBER: _ClassVar[int]
    EXECUTED_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    CODE_MODIFIED_FIELD_NUMBER: _ClassVar[int]
    TESTS_DISCOVERED_FIELD_NUMBER: _ClassVar[int]
    turn: int
    valid_format: bool
    is_submit: bool
    executed: bool
    exit_code: int
    timed_out: bool
    code_modified: bool
    tests_discovered: bool
    def __init__(self, turn: _Optional[int] = ..., valid_format: _Optional[bool] = ..., is_submit: _Optional[bool] = ..., executed: _Optional[bool] = ..., exit_code: _Optional[int] = ..., timed_out: _Optional[bool] = ..., code_modified: _Optional[bool] = ..., tests_discovered: _Optional[bool] = ...) -> None: ...

class TestSummary(_message.Message):
    __slots__ = ("passed", "failed", "errored", "total", "grouped", "f2p_passed", "f2p_failed", "p2p_passed", "p2p_failed", "resolved")
    PASSED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    ERRORED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    GROUPED_FIELD_NUMBER: _ClassVar[int]
    F2P_PASSED_FIELD_NUMBER: _ClassVar[int]
    F2P_FAILED_FIELD_NUMBER: _ClassVar[int]
    P2P_PASSED_FIELD_NUMBER: _ClassVar[int]
    P2P_FAILED_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_FIELD_NUMBER: _ClassVar[int]
    passed: int
    failed: int
    errored: int
    total: int
    grouped: bool
    f2p_passed: int
    f2p_failed: int
    p2p_passed: int
    p2p_failed: int
    resolved: bool
    def __init__(self, passed: _Optional[int] = ..., failed: _Optional[int] = ..., errored: _Optional[int] = ..., total: _Optional[int] = ..., grouped: _Optional[bool] = ..., f2p_passed: _Optional[int] = ..., f2p_failed: _Optional[int] = ..., p2p_passed: _Optional[int] = ..., p2p_failed: _Optional[int] = ..., resolved: _Optional[bool] = ...) -> None: ...

class Episode(_message.Message):
    __slots__ = ("steps", "check_ran", "check_passed", "tests", "finish", "turns", "agent", "evaluated", "evaluate_reward", "evaluate_done", "evaluate_text", "expected_answer", "tool_calls", "tests_seconds")
    class ToolCallsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STEPS_FIELD_NUMBER: _ClassVar[int]
    CHECK_RAN_FIELD_NUMBER: _ClassVar[int]
    CHECK_PASSED_FIELD_NUMBER: _ClassVar[int]
    TESTS_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_FIELD_NUMBER: _ClassVar[int]
    EVALUATE_REWARD_FIELD_NUMBER: _ClassVar[int]
    EVALUATE_DONE_FIELD_NUMBER: _ClassVar[int]
    EVALUATE_TEXT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_ANSWER_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TESTS_SECONDS_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[StepEvent]
    check_ran: bool
    check_passed: bool
    tests: TestSummary
    finish: str
    turns: int
    agent: str
    evaluated: bool
    evaluate_reward: float
    evaluate_done: bool
    evaluate_text: str
    expected_answer: str
    tool_calls: _containers.ScalarMap[str, int]
    tests_seconds: float
    def __init__(self, steps: _Optional[_Iterable[_Union[StepEvent, _Mapping]]] = ..., check_ran: _Optional[bool] = ..., check_passed: _Optional[bool] = ..., tests: _Optional[_Union[TestSummary, _Mapping]] = ..., finish: _Optional[str] = ..., turns: _Optional[int] = ..., agent: _Optional[str] = ..., evaluated: _Optional[bool] = ..., evaluate_reward: _Optional[float] = ..., evaluate_done: _Optional[bool] = ..., evaluate_text: _Optional[str] = ..., expected_answer: _Optional[str] = ..., tool_calls: _Optional[_Mapping[str, int]] = ..., tests_seconds: _Optional[float] = ...) -> None: ...

class ScorerFailure(_message.Message):
    __slots__ = ("scorer", "type", "message", "trajectory", "action")
    SCORER_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORY_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    scorer: str
    type: str
    message: str
    trajectory: int
    action: str
    def __init__(self, scorer: _Optional[str] = ..., type: _Optional[str] = ..., message: _Optional[str] = ..., trajectory: _Optional[int] = ..., action: _Optional[str] = ...) -> None: ...

class RewardOutcome(_message.Message):
    __slots__ = ("dropped", "group_dropped", "fail_job", "failures")
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    GROUP_DROPPED_FIELD_NUMBER: _ClassVar[int]
    FAIL_JOB_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    dropped: _containers.RepeatedScalarFieldContainer[int]
    group_dropped: bool
    fail_job: str
    failures: _containers.RepeatedCompositeFieldContainer[ScorerFailure]
    def __init__(self, dropped: _Optional[_Iterable[int]] = ..., group_dropped: _Optional[bool] = ..., fail_job: _Optional[str] = ..., failures: _Optional[_Iterable[_Union[ScorerFailure, _Mapping]]] = ...) -> None: ...

class Range(_message.Message):
    __slots__ = ("min", "max")
    MIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    min: float
    max: float
    def __init__(self, min: _Optional[float] = ..., max: _Optional[float] = ...) -> None: ...

class Gate(_message.Message):
    __slots__ = ("scorer", "min")
    SCORER_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    scorer: str
    min: float
    def __init__(self, scorer: _Optional[str] = ..., min: _Optional[float] = ...) -> None: ...

class ScorerSpec(_message.Message):
    __slots__ = ("name", "weight", "params_json", "on_error", "gate", "clip")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    ON_ERROR_FIELD_NUMBER: _ClassVar[int]
    GATE_FIELD_NUMBER: _ClassVar[int]
    CLIP_FIELD_NUMBER: _ClassVar[int]
    name: str
    weight: float
    params_json: str
    on_error: str
    gate: Gate
    clip: Range
    def __init__(self, name: _Optional[str] = ..., weight: _Optional[float] = ..., params_json: _Optional[str] = ..., on_error: _Optional[str] = ..., gate: _Optional[_Union[Gate, _Mapping]] = ..., clip: _Optional[_Union[Range, _Mapping]] = ...) -> None: ...

class PolicyEndpoint(_message.Message):
    __slots__ = ("model", "base_url")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BASE_URL_FIELD_NUMBER: _ClassVar[int]
    model: str
    base_url: str
    def __init__(self, model: _Optional[str] = ..., base_url: _Optional[str] = ...) -> None: ...

class RewardSpec(_message.Message):
    __slots__ = ("scorers", "clip", "policy")
    SCORERS_FIELD_NUMBER: _ClassVar[int]
    CLIP_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    scorers: _containers.RepeatedCompositeFieldContainer[ScorerSpec]
    clip: Range
    policy: PolicyEndpoint
    def __init__(self, scorers: _Optional[_Iterable[_Union[ScorerSpec, _Mapping]]] = ..., clip: _Optional[_Union[Range, _Mapping]] = ..., policy: _Optional[_Union[PolicyEndpoint, _Mapping]] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("name", "project", "base_model", "backend", "environment", "split", "steps", "groups_per_step", "rollouts_per_group", "learning_rate", "max_turns", "seed", "temperature", "max_tokens", "max_context_tokens", "enable_thinking", "skip_bad_records", "max_concurrent", "lora_rank", "finetune", "reward", "gather_timeout_s", "min_group_fraction", "max_seq_length", "gpu_memory_utilization", "task_prompt", "max_steps_off_policy", "priority", "off_policy_correction", "experiment", "grpo", "eval_every_steps", "eval_split", "eval_k", "eval_max_tasks", "eval_temperature", "keep_last", "keep_best_metric", "log_sample_rate", "dataset_size", "num_epochs", "sft", "mcp_config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_PER_STEP_FIELD_NUMBER: _ClassVar[int]
    ROLLOUTS_PER_GROUP_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_THINKING_FIELD_NUMBER: _ClassVar[int]
    SKIP_BAD_RECORDS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    FINETUNE_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    GATHER_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    MIN_GROUP_FRACTION_FIELD_NUMBER: _ClassVar[int]
    MAX_SEQ_LENGTH_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    TASK_PROMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_STEPS_OFF_POLICY_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    OFF_POLICY_CORRECTION_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    GRPO_FIELD_NUMBER: _ClassVar[int]
    EVAL_EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    EVAL_SPLIT_FIELD_NUMBER: _ClassVar[int]
    EVAL_K_FIELD_NUMBER: _ClassVar[int]
    EVAL_MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    EVAL_TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    KEEP_BEST_METRIC_FIELD_NUMBER: _ClassVar[int]
    LOG_SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    DATASET_SIZE_FIELD_NUMBER: _ClassVar[int]
    NUM_EPOCHS_FIELD_NUMBER: _ClassVar[int]
    SFT_FIELD_NUMBER: _ClassVar[int]
    MCP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    project: str
    base_model: str
    backend: str
    environment: str
    split: str
    steps: int
    groups_per_step: int
    rollouts_per_group: int
    learning_rate: float
    max_turns: int
    seed: int
    temperature: float
    max_tokens: int
    max_context_tokens: int
    enable_thinking: bool
    skip_bad_records: bool
    max_concurrent: int
    lora_rank: int
    finetune: str
    reward: RewardSpec
    gather_timeout_s: float
    min_group_fraction: float
    max_seq_length: int
    gpu_memory_utilization: float
    task_prompt: str
    max_steps_off_policy: int
    priority: int
    off_policy_correction: OffPolicyCorrection
    experiment: str
    grpo: GrpoSpec
    eval_every_steps: int
    eval_split: str
    eval_k: int
    eval_max_tasks: int
    eval_temperature: float
    keep_last: int
    keep_best_metric: str
    log_sample_rate: float
    dataset_size: int
    num_epochs: int
    sft: SftSpec
    mcp_config: str
    def __init__(self, name: _Optional[str] = ..., project: _Optional[str] = ..., base_model: _Optional[str] = ..., backend: _Optional[str] = ..., environment: _Optional[str] = ..., split: _Optional[str] = ..., steps: _Optional[int] = ..., groups_per_step: _Optional[int] = ..., rollouts_per_group: _Optional[int] = ..., learning_rate: _Optional[float] = ..., max_turns: _Optional[int] = ..., seed: _Optional[int] = ..., temperature: _Optional[float] = ..., max_tokens: _Optional[int] = ..., max_context_tokens: _Optional[int] = ..., enable_thinking: _Optional[bool] = ..., skip_bad_records: _Optional[bool] = ..., max_concurrent: _Optional[int] = ..., lora_rank: _Optional[int] = ..., finetune: _Optional[str] = ..., reward: _Optional[_Union[RewardSpec, _Mapping]] = ..., gather_timeout_s: _Optional[float] = ..., min_group_fraction: _Optional[float] = ..., max_seq_length: _Optional[int] = ..., gpu_memory_utilization: _Optional[float] = ..., task_prompt: _Optional[str] = ..., max_steps_off_policy: _Optional[int] = ..., priority: _Optional[int] = ..., off_policy_correction: _Optional[_Union[OffPolicyCorrection, _Mapping]] = ..., experiment: _Optional[str] = ..., grpo: _Optional[_Union[GrpoSpec, _Mapping]] = ..., eval_every_steps: _Optional[int] = ..., eval_split: _Optional[str] = ..., eval_k: _Optional[int] = ..., eval_max_tasks: _Optional[int] = ..., eval_temperature: _Optional[float] = ..., keep_last: _Optional[int] = ..., keep_best_metric: _Optional[str] = ..., log_sample_rate: _Optional[float] = ..., dataset_size: _Optional[int] = ..., num_epochs: _Optional[int] = ..., sft: _Optional[_Union[SftSpec, _Mapping]] = ..., mcp_config: _Optional[str] = ...) -> None: ...

class SftSpec(_message.Message):
    __slots__ = ("data_path", "format", "min_score", "epochs", "learning_rate", "batch_size", "max_samples", "max_length", "shuffle")
    DATA_PATH_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    MIN_SCORE_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    MAX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SHUFFLE_FIELD_NUMBER: _ClassVar[int]
    data_path: str
    format: str
    min_score: float
    epochs: int
    learning_rate: float
    batch_size: int
    max_samples: int
    max_length: int
    shuffle: bool
    def __init__(self, data_path: _Optional[str] = ..., format: _Optional[str] = ..., min_score: _Optional[float] = ..., epochs: _Optional[int] = ..., learning_rate: _Optional[float] = ..., batch_size: _Optional[int] = ..., max_samples: _Optional[int] = ..., max_length: _Optional[int] = ..., shuffle: _Optional[bool] = ...) -> None: ...

class SftProgress(_message.Message):
    __slots__ = ("epoch", "epochs", "batch", "batches", "loss", "learning_rate", "grad_norm", "done", "checkpoint_step", "epoch_losses")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    GRAD_NORM_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    EPOCH_LOSSES_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    epochs: int
    batch: int
    batches: int
    loss: float
    learning_rate: float
    grad_norm: float
    done: bool
    checkpoint_step: int
    epoch_losses: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, epoch: _Optional[int] = ..., epochs: _Optional[int] = ..., batch: _Optional[int] = ..., batches: _Optional[int] = ..., loss: _Optional[float] = ..., learning_rate: _Optional[float] = ..., grad_norm: _Optional[float] = ..., done: _Optional[bool] = ..., checkpoint_step: _Optional[int] = ..., epoch_losses: _Optional[_Iterable[float]] = ...) -> None: ...

class SftStatus(_message.Message):
    __slots__ = ("started", "done", "base_step", "checkpoint_step", "samples", "skipped", "batches", "epoch_losses", "seconds")
    class SkippedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STARTED_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    BASE_STEP_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    EPOCH_LOSSES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    started: bool
    done: bool
    base_step: int
    checkpoint_step: int
    samples: int
    skipped: _containers.ScalarMap[str, int]
    batches: int
    epoch_losses: _containers.RepeatedScalarFieldContainer[float]
    seconds: float
    def __init__(self, started: _Optional[bool] = ..., done: _Optional[bool] = ..., base_step: _Optional[int] = ..., checkpoint_step: _Optional[int] = ..., samples: _Optional[int] = ..., skipped: _Optional[_Mapping[str, int]] = ..., batches: _Optional[int] = ..., epoch_losses: _Optional[_Iterable[float]] = ..., seconds: _Optional[float] = ...) -> None: ...

class OffPolicyCorrection(_message.Message):
    __slots__ = ("mode", "cap", "band_low", "band_high")
    MODE_FIELD_NUMBER: _ClassVar[int]
    CAP_FIELD_NUMBER: _ClassVar[int]
    BAND_LOW_FIELD_NUMBER: _ClassVar[int]
    BAND_HIGH_FIELD_NUMBER: _ClassVar[int]
    mode: str
    cap: float
    band_low: float
    band_high: float
    def __init__(self, mode: _Optional[str] = ..., cap: _Optional[float] = ..., band_low: _Optional[float] = ..., band_high: _Optional[float] = ...) -> None: ...

class GrpoSpec(_message.Message):
    __slots__ = ("loss_fn", "normalize_advantages", "scale_rewards", "advantage_balance", "epsilon", "epsilon_high", "kl_penalty_coef", "kl_penalty_reference_step", "importance_sampling_level", "max_negative_advantage_importance_sampling_weight", "mask_prob_ratio", "kimi_k2_tau", "truncated_importance_sampling", "scale_learning_rate_by_reward_std_dev", "num_trajectories_learning_rate_multiplier_power", "packed_sequence_length", "logprob_calculation_chunk_size", "allow_training_without_logprobs", "precalculate_logprobs", "grad_accumulation_sequences")
    LOSS_FN_FIELD_NUMBER: _ClassVar[int]
    NORMALIZE_ADVANTAGES_FIELD_NUMBER: _ClassVar[int]
    SCALE_REWARDS_FIELD_NUMBER: _ClassVar[int]
    ADVANTAGE_BALANCE_FIELD_NUMBER: _ClassVar[int]
    EPSILON_FIELD_NUMBER: _ClassVar[int]
    EPSILON_HIGH_FIELD_NUMBER: _ClassVar[int]
    KL_PENALTY_COEF_FIELD_NUMBER: _ClassVar[int]
    KL_PENALTY_REFERENCE_STEP_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_SAMPLING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_NEGATIVE_ADVANTAGE_IMPORTANCE_SAMPLING_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    MASK_PROB_RATIO_FIELD_NUMBER: _ClassVar[int]
    KIMI_K2_TAU_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_IMPORTANCE_SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SCALE_LEARNING_RATE_BY_REWARD_STD_DEV_FIELD_NUMBER: _ClassVar[int]
    NUM_TRAJECTORIES_LEARNING_RATE_MULTIPLIER_POWER_FIELD_NUMBER: _ClassVar[int]
    PACKED_SEQUENCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_CALCULATION_CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_TRAINING_WITHOUT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PRECALCULATE_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    GRAD_ACCUMULATION_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    loss_fn: str
    normalize_advantages: bool
    scale_rewards: bool
    advantage_balance: float
    epsilon: float
    epsilon_high: float
    kl_penalty_coef: float
    kl_penalty_reference_step: int
    importance_sampling_level: str
    max_negative_advantage_importance_sampling_weight: float
    mask_prob_ratio: bool
    kimi_k2_tau: float
    truncated_importance_sampling: float
    scale_learning_rate_by_reward_std_dev: bool
    num_trajectories_learning_rate_multiplier_power: float
    packed_sequence_length: int
    logprob_calculation_chunk_size: int
    allow_training_without_logprobs: bool
    precalculate_logprobs: bool
    grad_accumulation_sequences: int
    def __init__(self, loss_fn: _Optional[str] = ..., normalize_advantages: _Optional[bool] = ..., scale_rewards: _Optional[bool] = ..., advantage_balance: _Optional[float] = ..., epsilon: _Optional[float] = ..., epsilon_high: _Optional[float] = ..., kl_penalty_coef: _Optional[float] = ..., kl_penalty_reference_step: _Optional[int] = ..., importance_sampling_level: _Optional[str] = ..., max_negative_advantage_importance_sampling_weight: _Optional[float] = ..., mask_prob_ratio: _Optional[bool] = ..., kimi_k2_tau: _Optional[float] = ..., truncated_importance_sampling: _Optional[float] = ..., scale_learning_rate_by_reward_std_dev: _Optional[bool] = ..., num_trajectories_learning_rate_multiplier_power: _Optional[float] = ..., packed_sequence_length: _Optional[int] = ..., logprob_calculation_chunk_size: _Optional[int] = ..., allow_training_without_logprobs: _Optional[bool] = ..., precalculate_logprobs: _Optional[bool] = ..., grad_accumulation_sequences: _Optional[int] = ...) -> None: ...

class EvalTaskResult(_message.Message):
    __slots__ = ("scenario_id", "rewards", "successes", "samples")
    SCENARIO_ID_FIELD_NUMBER: _ClassVar[int]
    REWARDS_FIELD_NUMBER: _ClassVar[int]
    SUCCESSES_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    scenario_id: str
    rewards: _containers.RepeatedScalarFieldContainer[float]
    successes: int
    samples: int
    def __init__(self, scenario_id: _Optional[str] = ..., rewards: _Optional[_Iterable[float]] = ..., successes: _Optional[int] = ..., samples: _Optional[int] = ...) -> None: ...

class EvalSummary(_message.Message):
    __slots__ = ("step", "split", "k", "tasks", "reward_mean", "success_rate", "avg_at_k", "pass_at_k", "seconds", "results", "policy", "served_policy")
    STEP_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    REWARD_MEAN_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_RATE_FIELD_NUMBER: _ClassVar[int]
    AVG_AT_K_FIELD_NUMBER: _ClassVar[int]
    PASS_AT_K_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SERVED_POLICY_FIELD_NUMBER: _ClassVar[int]
    step: int
    split: str
    k: int
    tasks: int
    reward_mean: float
    success_rate: float
    avg_at_k: float
    pass_at_k: float
    seconds: float
    results: _containers.RepeatedCompositeFieldContainer[EvalTaskResult]
    policy: str
    served_policy: str
    def __init__(self, step: _Optional[int] = ..., split: _Optional[str] = ..., k: _Optional[int] = ..., tasks: _Optional[int] = ..., reward_mean: _Optional[float] = ..., success_rate: _Optional[float] = ..., avg_at_k: _Optional[float] = ..., pass_at_k: _Optional[float] = ..., seconds: _Optional[float] = ..., results: _Optional[_Iterable[_Union[EvalTaskResult, _Mapping]]] = ..., policy: _Optional[str] = ..., served_policy: _Optional[str] = ...) -> None: ...

class SamplerMismatch(_message.Message):
    __slots__ = ("engine", "tokens", "abs_delta_mean", "abs_delta_p99", "k3", "ratio_p1", "ratio_p50", "ratio_p99", "outside_0_9_1_1", "outside_0_5_2", "warning")
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    ABS_DELTA_MEAN_FIELD_NUMBER: _ClassVar[int]
    ABS_DELTA_P99_FIELD_NUMBER: _ClassVar[int]
    K3_FIELD_NUMBER: _ClassVar[int]
    RATIO_P1_FIELD_NUMBER: _ClassVar[int]
    RATIO_P50_FIELD_NUMBER: _ClassVar[int]
    RATIO_P99_FIELD_NUMBER: _ClassVar[int]
    OUTSIDE_0_9_1_1_FIELD_NUMBER: _ClassVar[int]
    OUTSIDE_0_5_2_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    engine: str
    tokens: int
    abs_delta_mean: float
    abs_delta_p99: float
    k3: float
    ratio_p1: float
    ratio_p50: float
    ratio_p99: float
    outside_0_9_1_1: float
    outside_0_5_2: float
    warning: str
    def __init__(self, engine: _Optional[str] = ..., tokens: _Optional[int] = ..., abs_delta_mean: _Optional[float] = ..., abs_delta_p99: _Optional[float] = ..., k3: _Optional[float] = ..., ratio_p1: _Optional[float] = ..., ratio_p50: _Optional[float] = ..., ratio_p99: _Optional[float] = ..., outside_0_9_1_1: _Optional[float] = ..., outside_0_5_2: _Optional[float] = ..., warning: _Optional[str] = ...) -> None: ...

class StepSummary(_message.Message):
    __slots__ = ("step", "reward_mean", "reward_std", "turns_mean", "step_seconds", "trajectories", "groups", "loss", "trained_sequences", "rollout_seconds", "train_seconds", "staleness_mean", "staleness_max", "stale_groups_rerun", "trainer_idle_seconds", "rollout_idle_seconds", "scorer_errors", "scorer_error", "scoring_failed", "policy_wait_seconds", "episode_failures", "episodes_failed", "episodes", "failure_warning", "mismatch")
    class EpisodeFailuresEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    REWARD_MEAN_FIELD_NUMBER: _ClassVar[int]
    REWARD_STD_FIELD_NUMBER: _ClassVar[int]
    TURNS_MEAN_FIELD_NUMBER: _ClassVar[int]
    STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TRAJECTORIES_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    TRAINED_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STALENESS_MEAN_FIELD_NUMBER: _ClassVar[int]
    STALENESS_MAX_FIELD_NUMBER: _ClassVar[int]
    STALE_GROUPS_RERUN_FIELD_NUMBER: _ClassVar[int]
    TRAINER_IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ROLLOUT_IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SCORER_ERRORS_FIELD_NUMBER: _ClassVar[int]
    SCORER_ERROR_FIELD_NUMBER: _ClassVar[int]
    SCORING_FAILED_FIELD_NUMBER: _ClassVar[int]
    POLICY_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    EPISODE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FAILED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    FAILURE_WARNING_FIELD_NUMBER: _ClassVar[int]
    MISMATCH_FIELD_NUMBER: _ClassVar[int]
    step: int
    reward_mean: float
    reward_std: float
    turns_mean: float
    step_seconds: float
    trajectories: int
    groups: int
    loss: float
    trained_sequences: int
    rollout_seconds: float
    train_seconds: float
    staleness_mean: float
    staleness_max: int
    stale_groups_rerun: int
    trainer_idle_seconds: float
    rollout_idle_seconds: float
    scorer_errors: int
    scorer_error: str
    scoring_failed: bool
    policy_wait_seconds: float
    episode_failures: _containers.ScalarMap[str, int]
    episodes_failed: int
    episodes: int
    failure_warning: str
    mismatch: SamplerMismatch
    def __init__(self, step: _Optional[int] = ..., reward_mean: _Optional[float] = ..., reward_std: _Optional[float] = ..., turns_mean: _Optional[float] = ..., step_seconds: _Optional[float] = ..., trajectories: _Optional[int] = ..., groups: _Optional[int] = ..., loss: _Optional[float] = ..., trained_sequences: _Optional[int] = ..., rollout_seconds: _Optional[float] = ..., train_seconds: _Optional[float] = ..., staleness_mean: _Optional[float] = ..., staleness_max: _Optional[int] = ..., stale_groups_rerun: _Optional[int] = ..., trainer_idle_seconds: _Optional[float] = ..., rollout_idle_seconds: _Optional[float] = ..., scorer_errors: _Optional[int] = ..., scorer_error: _Optional[str] = ..., scoring_failed: _Optional[bool] = ..., policy_wait_seconds: _Optional[float] = ..., episode_failures: _Optional[_Mapping[str, int]] = ..., episodes_failed: _Optional[int] = ..., episodes: _Optional[int] = ..., failure_warning: _Optional[str] = ..., mismatch: _Optional[_Union[SamplerMismatch, _Mapping]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "spec", "state", "completed_steps", "error", "created_at", "updated_at", "steps", "policy", "config_hash", "queue_position", "evals", "sft", "resumes", "trained_nothing")
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_STEPS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    CONFIG_HASH_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    EVALS_FIELD_NUMBER: _ClassVar[int]
    SFT_FIELD_NUMBER: _ClassVar[int]
    RESUMES_FIELD_NUMBER: _ClassVar[int]
    TRAINED_NOTHING_FIELD_NUMBER: _ClassVar[int]
    id: str
    spec: JobSpec
    state: JobState
    completed_steps: int
    error: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    steps: _containers.RepeatedCompositeFieldContainer[StepSummary]
    policy: str
    config_hash: str
    queue_position: int
    evals: _containers.RepeatedCompositeFieldContainer[EvalSummary]
    sft: SftStatus
    resumes: _containers.RepeatedCompositeFieldContainer[JobResume]
    trained_nothing: bool
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., completed_steps: _Optional[int] = ..., error: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[StepSummary, _Mapping]]] = ..., policy: _Optional[str] = ..., config_hash: _Optional[str] = ..., queue_position: _Optional[int] = ..., evals: _Optional[_Iterable[_Union[EvalSummary, _Mapping]]] = ..., sft: _Optional[_Union[SftStatus, _Mapping]] = ..., resumes: _Optional[_Iterable[_Union[JobResume, _Mapping]]] = ..., trained_nothing: _Optional[bool] = ...) -> None: ...

class JobResume(_message.Message):
    __slots__ = ("time", "state", "error", "completed_steps")
    TIME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_STEPS_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    state: JobState
    error: str
    completed_steps: int
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., error: _Optional[str] = ..., completed_steps: _Optional[int] = ...) -> None: ...

class ProgressEvent(_message.Message):
    __slots__ = ("job_id", "seq", "time", "kind", "state", "step", "total_steps", "summary", "message", "eval", "sft")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EVAL_FIELD_NUMBER: _ClassVar[int]
    SFT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    seq: int
    time: _timestamp_pb2.Timestamp
    kind: EventKind
    state: JobState
    step: int
    total_steps: int
    summary: StepSummary
    message: str
    eval: EvalSummary
    sft: SftProgress
    def __init__(self, job_id: _Optional[str] = ..., seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[_Union[EventKind, str]] = ..., state: _Optional[_Union[JobState, str]] = ..., step: _Optional[int] = ..., total_steps: _Optional[int] = ..., summary: _Optional[_Union[StepSummary, _Mapping]] = ..., message: _Optional[str] = ..., eval: _Optional[_Union[EvalSummary, _Mapping]] = ..., sft: _Optional[_Union[SftProgress, _Mapping]] = ...) -> None: ...
