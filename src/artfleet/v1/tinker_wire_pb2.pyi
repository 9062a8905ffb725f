from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TinkerWireDType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TINKER_WIRE_DTYPE_UNSPECIFIED: _ClassVar[TinkerWireDType]
    TINKER_WIRE_DTYPE_FLOAT32: _ClassVar[TinkerWireDType]
    TINKER_WIRE_DTYPE_INT64: _ClassVar[TinkerWireDType]
    TINKER_WIRE_DTYPE_INT32: _ClassVar[TinkerWireDType]
    TINKER_WIRE_DTYPE_BFLOAT16: _ClassVar[TinkerWireDType]

class TinkerWireStopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TINKER_WIRE_STOP_REASON_STOP: _ClassVar[TinkerWireStopReason]
    TINKER_WIRE_STOP_REASON_LENGTH: _ClassVar[TinkerWireStopReason]
TINKER_WIRE_DTYPE_UNSPECIFIED: TinkerWireDType
TINKER_WIRE_DTYPE_FLOAT32: TinkerWireDType
TINKER_WIRE_DTYPE_INT64: TinkerWireDType
TINKER_WIRE_DTYPE_INT32: TinkerWireDType
TINKER_WIRE_DTYPE_BFLOAT16: TinkerWireDType
TINKER_WIRE_STOP_REASON_STOP: TinkerWireStopReason
TINKER_WIRE_STOP_REASON_LENGTH: TinkerWireStopReason

class TinkerWireSparseCsr(_message.Message):
    __slots__ = ("values", "crow_indices", "col_indices")
    VALUES_FIELD_NUMBER: _ClassVar[int]
    CROW_INDICES_FIELD_NUMBER: _ClassVar[int]
    COL_INDICES_FIELD_NUMBER: _ClassVar[int]
    values: bytes
    crow_indices: bytes
    col_indices: bytes
    def __init__(self, values: _Optional[bytes] = ..., crow_indices: _Optional[bytes] = ..., col_indices: _Optional[bytes] = ...) -> None: ...

class TinkerWireTensor(_message.Message):
    __slots__ = ("dense", "sparse_csr", "dtype", "shape")
    DENSE_FIELD_NUMBER: _ClassVar[int]
    SPARSE_CSR_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    dense: bytes
    sparse_csr: TinkerWireSparseCsr
    dtype: TinkerWireDType
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dense: _Optional[bytes] = ..., sparse_csr: _Optional[_Union[TinkerWireSparseCsr, _Mapping]] = ..., dtype: _Optional[_Union[TinkerWireDType, str]] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class TinkerWireEncodedTextChunk(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: bytes
    def __init__(self, tokens: _Optional[bytes] = ...) -> None: ...

class TinkerWireImageChunk(_message.Message):
    __slots__ = ("data", "format", "expected_tokens")
    DATA_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    format: str
    expected_tokens: int
    def __init__(self, data: _Optional[bytes] = ..., format: _Optional[str] = ..., expected_tokens: _Optional[int] = ...) -> None: ...

class TinkerWireDmelChunk(_message.Message):
    __slots__ = ("dmel",)
    DMEL_FIELD_NUMBER: _ClassVar[int]
    dmel: bytes
    def __init__(self, dmel: _Optional[bytes] = ...) -> None: ...

class TinkerWireChunk(_message.Message):
    __slots__ = ("encoded_text", "image", "dmel")
    ENCODED_TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    DMEL_FIELD_NUMBER: _ClassVar[int]
    encoded_text: TinkerWireEncodedTextChunk
    image: TinkerWireImageChunk
    dmel: TinkerWireDmelChunk
    def __init__(self, encoded_text: _Optional[_Union[TinkerWireEncodedTextChunk, _Mapping]] = ..., image: _Optional[_Union[TinkerWireImageChunk, _Mapping]] = ..., dmel: _Optional[_Union[TinkerWireDmelChunk, _Mapping]] = ...) -> None: ...

class TinkerWireDatum(_message.Message):
    __slots__ = ("model_input", "loss_fn_inputs")
    class LossFnInputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TinkerWireTensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TinkerWireTensor, _Mapping]] = ...) -> None: ...
    MODEL_INPUT_FIELD_NUMBER: _ClassVar[int]
    LOSS_FN_INPUTS_FIELD_NUMBER: _ClassVar[int]
    model_input: _containers.RepeatedCompositeFieldContainer[TinkerWireChunk]
    loss_fn_inputs: _containers.MessageMap[str, TinkerWireTensor]
    def __init__(self, model_input: _Optional[_Iterable[_Union[TinkerWireChunk, _Mapping]]] = ..., loss_fn_inputs: _Optional[_Mapping[str, TinkerWireTensor]] = ...) -> None: ...

class TinkerWireLossConfigValue(_message.Message):
    __slots__ = ("number", "text")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    number: float
    text: str
    def __init__(self, number: _Optional[float] = ..., text: _Optional[str] = ...) -> None: ...

class TinkerWireForwardBackwardRequest(_message.Message):
    __slots__ = ("model_id", "seq_id", "data", "loss_fn", "loss_fn_config", "forward_only", "loss_fn_config_v2")
    class LossFnConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class LossFnConfigV2Entry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TinkerWireLossConfigValue
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TinkerWireLossConfigValue, _Mapping]] = ...) -> None: ...
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LOSS_FN_FIELD_NUMBER: _ClassVar[int]
    LOSS_FN_CONFIG_FIELD_NUMBER: _ClassVar[int]
    FORWARD_ONLY_FIELD_NUMBER: _ClassVar[int]
    LOSS_FN_CONFIG_V2_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    seq_id: int
    data: _containers.RepeatedCompositeFieldContainer[TinkerWireDatum]
    loss_fn: str
    loss_fn_config: _containers.ScalarMap[str, float]
    forward_only: bool
    loss_fn_config_v2: _containers.MessageMap[str, TinkerWireLossConfigValue]
    def __init__(self, model_id: _Optional[str] = ..., seq_id: _Optional[int] = ..., data: _Optional[_Iterable[_Union[TinkerWireDatum, _Mapping]]] = ..., loss_fn: _Optional[str] = ..., loss_fn_config: _Optional[_Mapping[str, float]] = ..., forward_only: _Optional[bool] = ..., loss_fn_config_v2: _Optional[_Mapping[str, TinkerWireLossConfigValue]] = ...) -> None: ...

class TinkerWireBatchedTensor(_message.Message):
    __slots__ = ("data", "offsets", "dtype", "trailing_shape")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    TRAILING_SHAPE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offsets: bytes
    dtype: TinkerWireDType
    trailing_shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, data: _Optional[bytes] = ..., offsets: _Optional[bytes] = ..., dtype: _Optional[_Union[TinkerWireDType, str]] = ..., trailing_shape: _Optional[_Iterable[int]] = ...) -> None: ...

class TinkerWireArrayRecord(_message.Message):
    __slots__ = ("type_tag", "fields", "num_datums")
    class FieldsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TinkerWireBatchedTensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TinkerWireBatchedTensor, _Mapping]] = ...) -> None: ...
    TYPE_TAG_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    NUM_DATUMS_FIELD_NUMBER: _ClassVar[int]
    type_tag: str
    fields: _containers.MessageMap[str, TinkerWireBatchedTensor]
    num_datums: int
    def __init__(self, type_tag: _Optional[str] = ..., fields: _Optional[_Mapping[str, TinkerWireBatchedTensor]] = ..., num_datums: _Optional[int] = ...) -> None: ...

class TinkerWireForwardBackwardOutput(_message.Message):
    __slots__ = ("loss_fn_output_type", "loss_fn_outputs", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    LOSS_FN_OUTPUT_TYPE_FIELD_NUMBER: _ClassVar[int]
    LOSS_FN_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    loss_fn_output_type: str
    loss_fn_outputs: _containers.RepeatedCompositeFieldContainer[TinkerWireArrayRecord]
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, loss_fn_output_type: _Optional[str] = ..., loss_fn_outputs: _Optional[_Iterable[_Union[TinkerWireArrayRecord, _Mapping]]] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class TinkerWireSampledSequence(_message.Message):
    __slots__ = ("stop_reason", "tokens", "logprobs")
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    stop_reason: TinkerWireStopReason
    tokens: bytes
    logprobs: bytes
    def __init__(self, stop_reason: _Optional[_Union[TinkerWireStopReason, str]] = ..., tokens: _Optional[bytes] = ..., logprobs: _Optional[bytes] = ...) -> None: ...

class TinkerWireSampleResponse(_message.Message):
    __slots__ = ("sequences", "prompt_logprobs")
    SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    sequences: _containers.RepeatedCompositeFieldContainer[TinkerWireSampledSequence]
    prompt_logprobs: bytes
    def __init__(self, sequences: _Optional[_Iterable[_Union[TinkerWireSampledSequence, _Mapping]]] = ..., prompt_logprobs: _Optional[bytes] = ...) -> None: ...
