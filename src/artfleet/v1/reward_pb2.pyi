from artfleet.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ValidateSpecRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.RewardSpec
    def __init__(self, spec: _Optional[_Union[_common_pb2.RewardSpec, _Mapping]] = ...) -> None: ...

class ValidateSpecResponse(_message.Message):
    __slots__ = ("scorers",)
    SCORERS_FIELD_NUMBER: _ClassVar[int]
    scorers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, scorers: _Optional[_Iterable[str]] = ...) -> None: ...

class ScoreGroupRequest(_message.Message):
    __slots__ = ("group", "episodes", "spec")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    group: _common_pb2.TrajectoryGroup
    episodes: _containers.RepeatedCompositeFieldContainer[_common_pb2.Episode]
    spec: _common_pb2.RewardSpec
    def __init__(self, group: _Optional[_Union[_common_pb2.TrajectoryGroup, _Mapping]] = ..., episodes: _Optional[_Iterable[_Union[_common_pb2.Episode, _Mapping]]] = ..., spec: _Optional[_Union[_common_pb2.RewardSpec, _Mapping]] = ...) -> None: ...

class TrajectoryScore(_message.Message):
    __slots__ = ("reward", "components", "dropped", "metrics", "independent_reward", "logs")
    class ComponentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    REWARD_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    INDEPENDENT_REWARD_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    reward: float
    components: _containers.ScalarMap[str, float]
    dropped: bool
    metrics: _containers.ScalarMap[str, float]
    independent_reward: float
    logs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reward: _Optional[float] = ..., components: _Optional[_Mapping[str, float]] = ..., dropped: _Optional[bool] = ..., metrics: _Optional[_Mapping[str, float]] = ..., independent_reward: _Optional[float] = ..., logs: _Optional[_Iterable[str]] = ...) -> None: ...

class ScoreGroupResponse(_message.Message):
    __slots__ = ("scores", "outcome")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[TrajectoryScore]
    outcome: _common_pb2.RewardOutcome
    def __init__(self, scores: _Optional[_Iterable[_Union[TrajectoryScore, _Mapping]]] = ..., outcome: _Optional[_Union[_common_pb2.RewardOutcome, _Mapping]] = ...) -> None: ...
