from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateTrainingSessionRequest(_message.Message):
    __slots__ = ("tags", "user_metadata", "sdk_version")
    class UserMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TAGS_FIELD_NUMBER: _ClassVar[int]
    USER_METADATA_FIELD_NUMBER: _ClassVar[int]
    SDK_VERSION_FIELD_NUMBER: _ClassVar[int]
    tags: _containers.RepeatedScalarFieldContainer[str]
    user_metadata: _containers.ScalarMap[str, str]
    sdk_version: str
    def __init__(self, tags: _Optional[_Iterable[str]] = ..., user_metadata: _Optional[_Mapping[str, str]] = ..., sdk_version: _Optional[str] = ...) -> None: ...

class CreateTrainingSessionResponse(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class SessionHeartbeatRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class SessionHeartbeatResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class FinishSessionRequest(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class FinishSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TrainingCall(_message.Message):
    __slots__ = ("model_id", "seq_id", "session_id", "create_model", "forward_backward", "optim_step", "save_weights", "load_weights", "save_for_sampler", "sample", "pass_over")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_MODEL_FIELD_NUMBER: _ClassVar[int]
    FORWARD_BACKWARD_FIELD_NUMBER: _ClassVar[int]
    OPTIM_STEP_FIELD_NUMBER: _ClassVar[int]
    SAVE_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    LOAD_WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    SAVE_FOR_SAMPLER_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    PASS_OVER_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    seq_id: int
    session_id: str
    create_model: CreateModelOp
    forward_backward: ForwardBackwardOp
    optim_step: OptimStepOp
    save_weights: SaveWeightsOp
    load_weights: LoadWeightsOp
    save_for_sampler: SaveForSamplerOp
    sample: SampleOp
    pass_over: PassOverOp
    def __init__(self, model_id: _Optional[str] = ..., seq_id: _Optional[int] = ..., session_id: _Optional[str] = ..., create_model: _Optional[_Union[CreateModelOp, _Mapping]] = ..., forward_backward: _Optional[_Union[ForwardBackwardOp, _Mapping]] = ..., optim_step: _Optional[_Union[OptimStepOp, _Mapping]] = ..., save_weights: _Optional[_Union[SaveWeightsOp, _Mapping]] = ..., load_weights: _Optional[_Union[LoadWeightsOp, _Mapping]] = ..., save_for_sampler: _Optional[_Union[SaveForSamplerOp, _Mapping]] = ..., sample: _Optional[_Union[SampleOp, _Mapping]] = ..., pass_over: _Optional[_Union[PassOverOp, _Mapping]] = ...) -> None: ...

class PassOverOp(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class CreateModelOp(_message.Message):
    __slots__ = ("model_seq_id", "base_model", "rank", "seed", "train_mlp", "train_attn", "train_unembed", "user_metadata")
    class UserMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TRAIN_MLP_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ATTN_FIELD_NUMBER: _ClassVar[int]
    TRAIN_UNEMBED_FIELD_NUMBER: _ClassVar[int]
    USER_METADATA_FIELD_NUMBER: _ClassVar[int]
    model_seq_id: int
    base_model: str
    rank: int
    seed: int
    train_mlp: bool
    train_attn: bool
    train_unembed: bool
    user_metadata: _containers.ScalarMap[str, str]
    def __init__(self, model_seq_id: _Optional[int] = ..., base_model: _Optional[str] = ..., rank: _Optional[int] = ..., seed: _Optional[int] = ..., train_mlp: _Optional[bool] = ..., train_attn: _Optional[bool] = ..., train_unembed: _Optional[bool] = ..., user_metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class FloatArray(_message.Message):
    __slots__ = ("values", "shape")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[float]] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class Datum(_message.Message):
    __slots__ = ("tokens", "target_tokens", "inputs")
    class InputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: FloatArray
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[FloatArray, _Mapping]] = ...) -> None: ...
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    target_tokens: _containers.RepeatedScalarFieldContainer[int]
    inputs: _containers.MessageMap[str, FloatArray]
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., target_tokens: _Optional[_Iterable[int]] = ..., inputs: _Optional[_Mapping[str, FloatArray]] = ...) -> None: ...

class ForwardBackwardOp(_message.Message):
    __slots__ = ("data", "loss_fn", "loss_fn_config", "forward_only")
    class LossFnConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    DATA_FIELD_NUMBER: _ClassVar[int]
    LOSS_FN_FIELD_NUMBER: _ClassVar[int]
    LOSS_FN_CONFIG_FIELD_NUMBER: _ClassVar[int]
    FORWARD_ONLY_FIELD_NUMBER: _ClassVar[int]
    data: _containers.RepeatedCompositeFieldContainer[Datum]
    loss_fn: str
    loss_fn_config: _containers.ScalarMap[str, float]
    forward_only: bool
    def __init__(self, data: _Optional[_Iterable[_Union[Datum, _Mapping]]] = ..., loss_fn: _Optional[str] = ..., loss_fn_config: _Optional[_Mapping[str, float]] = ..., forward_only: _Optional[bool] = ...) -> None: ...

class AdamParams(_message.Message):
    __slots__ = ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm")
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    BETA1_FIELD_NUMBER: _ClassVar[int]
    BETA2_FIELD_NUMBER: _ClassVar[int]
    EPS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    GRAD_CLIP_NORM_FIELD_NUMBER: _ClassVar[int]
    learning_rate: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    grad_clip_norm: float
    def __init__(self, learning_rate: _Optional[float] = ..., beta1: _Optional[float] = ..., beta2: _Optional[float] = ..., eps: _Optional[float] = ..., weight_decay: _Optional[float] = ..., grad_clip_norm: _Optional[float] = ...) -> None: ...

class OptimStepOp(_message.Message):
    __slots__ = ("adam",)
    ADAM_FIELD_NUMBER: _ClassVar[int]
    adam: AdamParams
    def __init__(self, adam: _Optional[_Union[AdamParams, _Mapping]] = ...) -> None: ...

class SaveWeightsOp(_message.Message):
    __slots__ = ("name", "overwrite")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OVERWRITE_FIELD_NUMBER: _ClassVar[int]
    name: str
    overwrite: bool
    def __init__(self, name: _Optional[str] = ..., overwrite: _Optional[bool] = ...) -> None: ...

class LoadWeightsOp(_message.Message):
    __slots__ = ("path", "optimizer", "model_seq_id")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    MODEL_SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    optimizer: bool
    model_seq_id: int
    def __init__(self, path: _Optional[str] = ..., optimizer: _Optional[bool] = ..., model_seq_id: _Optional[int] = ...) -> None: ...

class SaveForSamplerOp(_message.Message):
    __slots__ = ("name", "sampling_session_seq_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_SESSION_SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    sampling_session_seq_id: int
    def __init__(self, name: _Optional[str] = ..., sampling_session_seq_id: _Optional[int] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("max_tokens", "seed", "temperature", "top_k", "top_p", "stop_strings", "stop_tokens", "stop_set")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    STOP_STRINGS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_SET_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    seed: int
    temperature: float
    top_k: int
    top_p: float
    stop_strings: _containers.RepeatedScalarFieldContainer[str]
    stop_tokens: _containers.RepeatedScalarFieldContainer[int]
    stop_set: bool
    def __init__(self, max_tokens: _Optional[int] = ..., seed: _Optional[int] = ..., temperature: _Optional[float] = ..., top_k: _Optional[int] = ..., top_p: _Optional[float] = ..., stop_strings: _Optional[_Iterable[str]] = ..., stop_tokens: _Optional[_Iterable[int]] = ..., stop_set: _Optional[bool] = ...) -> None: ...

class SampleOp(_message.Message):
    __slots__ = ("sampling_session_id", "prompt", "num_samples", "params", "prompt_logprobs")
    SAMPLING_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    NUM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    sampling_session_id: str
    prompt: _containers.RepeatedScalarFieldContainer[int]
    num_samples: int
    params: SamplingParams
    prompt_logprobs: bool
    def __init__(self, sampling_session_id: _Optional[str] = ..., prompt: _Optional[_Iterable[int]] = ..., num_samples: _Optional[int] = ..., params: _Optional[_Union[SamplingParams, _Mapping]] = ..., prompt_logprobs: _Optional[bool] = ...) -> None: ...

class Promise(_message.Message):
    __slots__ = ("request_id", "model_id", "sample_sequence_ids")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_SEQUENCE_IDS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model_id: str
    sample_sequence_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[str] = ..., model_id: _Optional[str] = ..., sample_sequence_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class RetrieveRequest(_message.Message):
    __slots__ = ("request_id", "wait_s")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    wait_s: float
    def __init__(self, request_id: _Optional[str] = ..., wait_s: _Optional[float] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("message", "category", "retryable")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    message: str
    category: str
    retryable: bool
    def __init__(self, message: _Optional[str] = ..., category: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class ForwardBackwardResult(_message.Message):
    __slots__ = ("logprobs", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    logprobs: _containers.RepeatedCompositeFieldContainer[FloatArray]
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, logprobs: _Optional[_Iterable[_Union[FloatArray, _Mapping]]] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class OptimStepResult(_message.Message):
    __slots__ = ("metrics",)
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    METRICS_FIELD_NUMBER: _ClassVar[int]
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class CreateModelResult(_message.Message):
    __slots__ = ("model_id",)
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    def __init__(self, model_id: _Optional[str] = ...) -> None: ...

class SaveResult(_message.Message):
    __slots__ = ("path", "sampling_session_id")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    sampling_session_id: str
    def __init__(self, path: _Optional[str] = ..., sampling_session_id: _Optional[str] = ...) -> None: ...

class LoadResult(_message.Message):
    __slots__ = ("model_id", "path")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    path: str
    def __init__(self, model_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class SampledSequence(_message.Message):
    __slots__ = ("tokens", "logprobs", "stop_reason")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedScalarFieldContainer[float]
    stop_reason: str
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[float]] = ..., stop_reason: _Optional[str] = ...) -> None: ...

class SampleResult(_message.Message):
    __slots__ = ("sequences", "prompt_logprobs")
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    sequences: _containers.RepeatedCompositeFieldContainer[SampledSequence]
    prompt_logprobs: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, sequences: _Optional[_Iterable[_Union[SampledSequence, _Mapping]]] = ..., prompt_logprobs: _Optional[_Iterable[float]] = ...) -> None: ...

class RetrieveResponse(_message.Message):
    __slots__ = ("pending", "failure", "create_model", "forward_backward", "optim_step", "save", "load", "sample")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    CREATE_MODEL_FIELD_NUMBER: _ClassVar[int]
    FORWARD_BACKWARD_FIELD_NUMBER: _ClassVar[int]
    OPTIM_STEP_FIELD_NUMBER: _ClassVar[int]
    SAVE_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    pending: bool
    failure: Failure
    create_model: CreateModelResult
    forward_backward: ForwardBackwardResult
    optim_step: OptimStepResult
    save: SaveResult
    load: LoadResult
    sample: SampleResult
    def __init__(self, pending: _Optional[bool] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ..., create_model: _Optional[_Union[CreateModelResult, _Mapping]] = ..., forward_backward: _Optional[_Union[ForwardBackwardResult, _Mapping]] = ..., optim_step: _Optional[_Union[OptimStepResult, _Mapping]] = ..., save: _Optional[_Union[SaveResult, _Mapping]] = ..., load: _Optional[_Union[LoadResult, _Mapping]] = ..., sample: _Optional[_Union[SampleResult, _Mapping]] = ...) -> None: ...

class GetInfoRequest(_message.Message):
    __slots__ = ("model_id",)
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    def __init__(self, model_id: _Optional[str] = ...) -> None: ...

class TrainingClientInfo(_message.Message):
    __slots__ = ("model_id", "base_model", "tokenizer_id", "arch", "lora_rank")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_ID_FIELD_NUMBER: _ClassVar[int]
    ARCH_FIELD_NUMBER: _ClassVar[int]
    LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    base_model: str
    tokenizer_id: str
    arch: str
    lora_rank: int
    def __init__(self, model_id: _Optional[str] = ..., base_model: _Optional[str] = ..., tokenizer_id: _Optional[str] = ..., arch: _Optional[str] = ..., lora_rank: _Optional[int] = ...) -> None: ...

class CreateSamplingSessionRequest(_message.Message):
    __slots__ = ("session_id", "sampling_session_seq_id", "model_path", "base_model")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_SESSION_SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    sampling_session_seq_id: int
    model_path: str
    base_model: str
    def __init__(self, session_id: _Optional[str] = ..., sampling_session_seq_id: _Optional[int] = ..., model_path: _Optional[str] = ..., base_model: _Optional[str] = ...) -> None: ...

class GetSamplerRequest(_message.Message):
    __slots__ = ("sampler_id",)
    SAMPLER_ID_FIELD_NUMBER: _ClassVar[int]
    sampler_id: str
    def __init__(self, sampler_id: _Optional[str] = ...) -> None: ...

class SamplingSession(_message.Message):
    __slots__ = ("sampling_session_id", "base_model", "model_path")
    SAMPLING_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    sampling_session_id: str
    base_model: str
    model_path: str
    def __init__(self, sampling_session_id: _Optional[str] = ..., base_model: _Optional[str] = ..., model_path: _Optional[str] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("checkpoint_id", "checkpoint_type", "time", "tinker_path", "size_bytes", "step")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_TYPE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TINKER_PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    checkpoint_type: str
    time: float
    tinker_path: str
    size_bytes: int
    step: int
    def __init__(self, checkpoint_id: _Optional[str] = ..., checkpoint_type: _Optional[str] = ..., time: _Optional[float] = ..., tinker_path: _Optional[str] = ..., size_bytes: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class TrainingRun(_message.Message):
    __slots__ = ("training_run_id", "base_model", "lora_rank", "last_request_time", "last_checkpoint", "last_sampler_checkpoint", "user_metadata", "loaded")
    class UserMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TRAINING_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    LAST_REQUEST_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LAST_SAMPLER_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    USER_METADATA_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    training_run_id: str
    base_model: str
    lora_rank: int
    last_request_time: float
    last_checkpoint: Checkpoint
    last_sampler_checkpoint: Checkpoint
    user_metadata: _containers.ScalarMap[str, str]
    loaded: bool
    def __init__(self, training_run_id: _Optional[str] = ..., base_model: _Optional[str] = ..., lora_rank: _Optional[int] = ..., last_request_time: _Optional[float] = ..., last_checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., last_sampler_checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., user_metadata: _Optional[_Mapping[str, str]] = ..., loaded: _Optional[bool] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("limit", "offset")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    limit: int
    offset: int
    def __init__(self, limit: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "total")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[TrainingRun]
    total: int
    def __init__(self, runs: _Optional[_Iterable[_Union[TrainingRun, _Mapping]]] = ..., total: _Optional[int] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("training_run_id",)
    TRAINING_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    training_run_id: str
    def __init__(self, training_run_id: _Optional[str] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ("training_run_id",)
    TRAINING_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    training_run_id: str
    def __init__(self, training_run_id: _Optional[str] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class DeleteCheckpointRequest(_message.Message):
    __slots__ = ("training_run_id", "checkpoint_id")
    TRAINING_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    training_run_id: str
    checkpoint_id: str
    def __init__(self, training_run_id: _Optional[str] = ..., checkpoint_id: _Optional[str] = ...) -> None: ...

class DeleteCheckpointResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WeightsInfoRequest(_message.Message):
    __slots__ = ("tinker_path",)
    TINKER_PATH_FIELD_NUMBER: _ClassVar[int]
    tinker_path: str
    def __init__(self, tinker_path: _Optional[str] = ...) -> None: ...

class WeightsInfoResponse(_message.Message):
    __slots__ = ("base_model", "lora_rank", "train_mlp", "train_attn", "train_unembed")
    BASE_MODEL_FIELD_NUMBER: _ClassVar[int]
    LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    TRAIN_MLP_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ATTN_FIELD_NUMBER: _ClassVar[int]
    TRAIN_UNEMBED_FIELD_NUMBER: _ClassVar[int]
    base_model: str
    lora_rank: int
    train_mlp: bool
    train_attn: bool
    train_unembed: bool
    def __init__(self, base_model: _Optional[str] = ..., lora_rank: _Optional[int] = ..., train_mlp: _Optional[bool] = ..., train_attn: _Optional[bool] = ..., train_unembed: _Optional[bool] = ...) -> None: ...

class CapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SupportedModel(_message.Message):
    __slots__ = ("model_name", "max_context_length")
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    model_name: str
    max_context_length: int
    def __init__(self, model_name: _Optional[str] = ..., max_context_length: _Optional[int] = ...) -> None: ...

class CapabilitiesResponse(_message.Message):
    __slots__ = ("models", "loss_fns")
    MODELS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FNS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[SupportedModel]
    loss_fns: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, models: _Optional[_Iterable[_Union[SupportedModel, _Mapping]]] = ..., loss_fns: _Optional[_Iterable[str]] = ...) -> None: ...
