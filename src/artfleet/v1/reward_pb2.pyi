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
    __slots__ = ("reward", "components")
    class ComponentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    REWARD_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    reward: float
    components: _containers.ScalarMap[str, float]
    def __init__(self, reward: _Optional[float] = ..., components: _Optional[_Mapping[str, float]] = ...) -> None: ...

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

class ScoreGroupResponse(_message.Message):
    __slots__ = ("group", "scores", "dropped", "group_dropped", "fail_job", "failures")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    GROUP_DROPPED_FIELD_NUMBER: _ClassVar[int]
    FAIL_JOB_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    group: _common_pb2.TrajectoryGroup
    scores: _containers.RepeatedCompositeFieldContainer[TrajectoryScore]
    dropped: _containers.RepeatedScalarFieldContainer[int]
    group_dropped: bool
    fail_job: str
    failures: _containers.RepeatedCompositeFieldContainer[ScorerFailure]
    def __init__(self, group: _Optional[_Union[_common_pb2.TrajectoryGroup, _Mapping]] = ..., scores: _Optional[_Iterable[_Union[TrajectoryScore, _Mapping]]] = ..., dropped: _Optional[_Iterable[int]] = ..., group_dropped: _Optional[bool] = ..., fail_job: _Optional[str] = ..., failures: _Optional[_Iterable[_Union[ScorerFailure, _Mapping]]] = ...) -> None: ...
