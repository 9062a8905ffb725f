from artfleet.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelCheckpoint(_message.Message):
    __slots__ = ("step", "bytes", "best")
    STEP_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    BEST_FIELD_NUMBER: _ClassVar[int]
    step: int
    bytes: int
    best: bool
    def __init__(self, step: _Optional[int] = ..., bytes: _Optional[int] = ..., best: _Optional[bool] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "project", "job_id", "job_state", "experiment", "config_hash", "base_model", "checkpoints", "latest_step", "path", "tinker_run")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_STATE_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_HASH_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    LATEST_STEP_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TINKER_RUN_FIELD_NUMBER: _ClassVar[int]
    name: str
    project: str
    job_id: str
    job_state: _common_pb2.JobState
    experiment: str
    config_hash: str
    base_model: str
    checkpoints: _containers.RepeatedCompositeFieldContainer[ModelCheckpoint]
    latest_step: int
    path: str
    tinker_run: TinkerRun
    def __init__(self, name: _Optional[str] = ..., project: _Optional[str] = ..., job_id: _Optional[str] = ..., job_state: _Optional[_Union[_common_pb2.JobState, str]] = ..., experiment: _Optional[str] = ..., config_hash: _Optional[str] = ..., base_model: _Optional[str] = ..., checkpoints: _Optional[_Iterable[_Union[ModelCheckpoint, _Mapping]]] = ..., latest_step: _Optional[int] = ..., path: _Optional[str] = ..., tinker_run: _Optional[_Union[TinkerRun, _Mapping]] = ...) -> None: ...

class TinkerRun(_message.Message):
    __slots__ = ("training_run_id", "lora_rank")
    TRAINING_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    training_run_id: str
    lora_rank: int
    def __init__(self, training_run_id: _Optional[str] = ..., lora_rank: _Optional[int] = ...) -> None: ...

class ModelsListRequest(_message.Message):
    __slots__ = ("experiment",)
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    experiment: str
    def __init__(self, experiment: _Optional[str] = ...) -> None: ...

class ModelsListResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class ModelsGetRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class ModelsDeleteRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class ModelsDeleteResponse(_message.Message):
    __slots__ = ("deleted_steps",)
    DELETED_STEPS_FIELD_NUMBER: _ClassVar[int]
    deleted_steps: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, deleted_steps: _Optional[_Iterable[int]] = ...) -> None: ...

class ModelsPruneRequest(_message.Message):
    __slots__ = ("model", "keep", "dry_run")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    model: str
    keep: int
    dry_run: bool
    def __init__(self, model: _Optional[str] = ..., keep: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class PrunedCheckpoint(_message.Message):
    __slots__ = ("step", "bytes", "reason")
    STEP_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    step: int
    bytes: int
    reason: str
    def __init__(self, step: _Optional[int] = ..., bytes: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ModelsPruneResponse(_message.Message):
    __slots__ = ("model", "kept", "deleted", "dry_run")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    model: str
    kept: _containers.RepeatedCompositeFieldContainer[PrunedCheckpoint]
    deleted: _containers.RepeatedCompositeFieldContainer[PrunedCheckpoint]
    dry_run: bool
    def __init__(self, model: _Optional[str] = ..., kept: _Optional[_Iterable[_Union[PrunedCheckpoint, _Mapping]]] = ..., deleted: _Optional[_Iterable[_Union[PrunedCheckpoint, _Mapping]]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class ModelsExportRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class ModelsExportChunk(_message.Message):
    __slots__ = ("file", "data", "step")
    FILE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    file: str
    data: bytes
    step: int
    def __init__(self, file: _Optional[str] = ..., data: _Optional[bytes] = ..., step: _Optional[int] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec", "idempotency_key")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.JobSpec
    idempotency_key: str
    def __init__(self, spec: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("limit", "experiment")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    EXPERIMENT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    experiment: str
    def __init__(self, limit: _Optional[int] = ..., experiment: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[_common_pb2.Job, _Mapping]]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ResumeJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id", "from_seq")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    from_seq: int
    def __init__(self, job_id: _Optional[str] = ..., from_seq: _Optional[int] = ...) -> None: ...

class DescribeTrainerRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TrainerInfo(_message.Message):
    __slots__ = ("backend", "wandb_configured", "base_models")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    WANDB_CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    BASE_MODELS_FIELD_NUMBER: _ClassVar[int]
    backend: str
    wandb_configured: bool
    base_models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, backend: _Optional[str] = ..., wandb_configured: _Optional[bool] = ..., base_models: _Optional[_Iterable[str]] = ...) -> None: ...
