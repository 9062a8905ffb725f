from artfleet.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GroupState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GROUP_STATE_UNSPECIFIED: _ClassVar[GroupState]
    GROUP_STATE_FAILED: _ClassVar[GroupState]
    GROUP_STATE_DROPPED: _ClassVar[GroupState]
    GROUP_STATE_SCORED: _ClassVar[GroupState]
    GROUP_STATE_FAIL_JOB: _ClassVar[GroupState]
GROUP_STATE_UNSPECIFIED: GroupState
GROUP_STATE_FAILED: GroupState
GROUP_STATE_DROPPED: GroupState
GROUP_STATE_SCORED: GroupState
GROUP_STATE_FAIL_JOB: GroupState

class BatchGroup(_message.Message):
    __slots__ = ("group_id", "state", "group", "outcome")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    state: GroupState
    group: _common_pb2.TrajectoryGroup
    outcome: _common_pb2.RewardOutcome
    def __init__(self, group_id: _Optional[str] = ..., state: _Optional[_Union[GroupState, str]] = ..., group: _Optional[_Union[_common_pb2.TrajectoryGroup, _Mapping]] = ..., outcome: _Optional[_Union[_common_pb2.RewardOutcome, _Mapping]] = ...) -> None: ...
