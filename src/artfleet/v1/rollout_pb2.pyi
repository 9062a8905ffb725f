from artfleet.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListPluginsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Plugin(_message.Message):
    __slots__ = ("group", "name", "package", "version", "state", "error")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PACKAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    group: str
    name: str
    package: str
    version: str
    state: str
    error: str
    def __init__(self, group: _Optional[str] = ..., name: _Optional[str] = ..., package: _Optional[str] = ..., version: _Optional[str] = ..., state: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ListPluginsResponse(_message.Message):
    __slots__ = ("plugins",)
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    plugins: _containers.RepeatedCompositeFieldContainer[Plugin]
    def __init__(self, plugins: _Optional[_Iterable[_Union[Plugin, _Mapping]]] = ...) -> None: ...

class DescribeEnvironmentRequest(_message.Message):
    __slots__ = ("name", "probe_evaluate", "mcp_config")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROBE_EVALUATE_FIELD_NUMBER: _ClassVar[int]
    MCP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    name: str
    probe_evaluate: bool
    mcp_config: str
    def __init__(self, name: _Optional[str] = ..., probe_evaluate: _Optional[bool] = ..., mcp_config: _Optional[str] = ...) -> None: ...

class ScenarioInfo(_message.Message):
    __slots__ = ("id", "split", "title", "image")
    ID_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    split: str
    title: str
    image: str
    def __init__(self, id: _Optional[str] = ..., split: _Optional[str] = ..., title: _Optional[str] = ..., image: _Optional[str] = ...) -> None: ...

class EnvironmentInfo(_message.Message):
    __slots__ = ("name", "description", "split_sizes", "scenarios", "agent", "skipped")
    class SplitSizesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class SkippedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SPLIT_SIZES_FIELD_NUMBER: _ClassVar[int]
    SCENARIOS_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    split_sizes: _containers.ScalarMap[str, int]
    scenarios: _containers.RepeatedCompositeFieldContainer[ScenarioInfo]
    agent: str
    skipped: _containers.ScalarMap[str, int]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., split_sizes: _Optional[_Mapping[str, int]] = ..., scenarios: _Optional[_Iterable[_Union[ScenarioInfo, _Mapping]]] = ..., agent: _Optional[str] = ..., skipped: _Optional[_Mapping[str, int]] = ...) -> None: ...

class GroupTask(_message.Message):
    __slots__ = ("job_id", "step", "group_id", "environment", "scenario_id", "rollouts", "max_turns", "model_base_url", "policy", "temperature", "max_tokens", "max_context_tokens", "reward", "seed", "model_api_key_env", "policy_version", "task_prompt", "max_concurrent", "mcp_config", "enable_thinking")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    SCENARIO_ID_FIELD_NUMBER: _ClassVar[int]
    ROLLOUTS_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    MODEL_BASE_URL_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MODEL_API_KEY_ENV_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    TASK_PROMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    MCP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    ENABLE_THINKING_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    step: int
    group_id: str
    environment: str
    scenario_id: str
    rollouts: int
    max_turns: int
    model_base_url: str
    policy: str
    temperature: float
    max_tokens: int
    max_context_tokens: int
    reward: _common_pb2.RewardSpec
    seed: int
    model_api_key_env: str
    policy_version: int
    task_prompt: str
    max_concurrent: int
    mcp_config: str
    enable_thinking: bool
    def __init__(self, job_id: _Optional[str] = ..., step: _Optional[int] = ..., group_id: _Optional[str] = ..., environment: _Optional[str] = ..., scenario_id: _Optional[str] = ..., rollouts: _Optional[int] = ..., max_turns: _Optional[int] = ..., model_base_url: _Optional[str] = ..., policy: _Optional[str] = ..., temperature: _Optional[float] = ..., max_tokens: _Optional[int] = ..., max_context_tokens: _Optional[int] = ..., reward: _Optional[_Union[_common_pb2.RewardSpec, _Mapping]] = ..., seed: _Optional[int] = ..., model_api_key_env: _Optional[str] = ..., policy_version: _Optional[int] = ..., task_prompt: _Optional[str] = ..., max_concurrent: _Optional[int] = ..., mcp_config: _Optional[str] = ..., enable_thinking: _Optional[bool] = ...) -> None: ...

class RunGroupRequest(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: GroupTask
    def __init__(self, task: _Optional[_Union[GroupTask, _Mapping]] = ...) -> None: ...

class RunGroupResponse(_message.Message):
    __slots__ = ("group", "episodes", "outcome")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    group: _common_pb2.TrajectoryGroup
    episodes: _containers.RepeatedCompositeFieldContainer[_common_pb2.Episode]
    outcome: _common_pb2.RewardOutcome
    def __init__(self, group: _Optional[_Union[_common_pb2.TrajectoryGroup, _Mapping]] = ..., episodes: _Optional[_Iterable[_Union[_common_pb2.Episode, _Mapping]]] = ..., outcome: _Optional[_Union[_common_pb2.RewardOutcome, _Mapping]] = ...) -> None: ...

class CheckPolicyRequest(_message.Message):
    __slots__ = ("model_base_url", "policy", "model_api_key_env")
    MODEL_BASE_URL_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    MODEL_API_KEY_ENV_FIELD_NUMBER: _ClassVar[int]
    model_base_url: str
    policy: str
    model_api_key_env: str
    def __init__(self, model_base_url: _Optional[str] = ..., policy: _Optional[str] = ..., model_api_key_env: _Optional[str] = ...) -> None: ...

class CheckPolicyResponse(_message.Message):
    __slots__ = ("reachable", "authorized", "served", "models", "error", "served_as")
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZED_FIELD_NUMBER: _ClassVar[int]
    SERVED_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SERVED_AS_FIELD_NUMBER: _ClassVar[int]
    reachable: bool
    authorized: bool
    served: bool
    models: _containers.RepeatedScalarFieldContainer[str]
    error: str
    served_as: str
    def __init__(self, reachable: _Optional[bool] = ..., authorized: _Optional[bool] = ..., served: _Optional[bool] = ..., models: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ..., served_as: _Optional[str] = ...) -> None: ...
