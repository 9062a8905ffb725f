"""forward_backward bodies onto the trainer's ForwardBackwardOp: the protobuf body of newer
clients and the JSON body of older ones (and their `forward`). Both end in the same
checks: text chunks only, one value per position, finite numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from artfleet.v1 import tinker_api_pb2 as pb
from artfleet.v1 import tinker_wire_pb2 as wire
from artfleet_api.tinker_api.bodies import (
    ChunkBody,
    ForwardBackwardInputBody,
    TensorBody,
)
from artfleet_api.tinker_api.errors import WireError, naming_the_call

PROTO_DTYPES: dict[int, np.dtype[Any]] = {
    wire.TINKER_WIRE_DTYPE_FLOAT32: np.dtype("<f4"),
    wire.TINKER_WIRE_DTYPE_INT64: np.dtype("<i8"),
}
DTYPE_NAMES = {
    v: k.removeprefix("TINKER_WIRE_DTYPE_").lower() for k, v in wire.TinkerWireDType.items()
}
JSON_DTYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype(np.float32),
    "int64": np.dtype(np.int64),
}
TARGETS = "target_tokens"
TEXT_ONLY = "this server serves text only (encoded_text chunks)"


def from_proto(body: bytes) -> pb.TrainingCall:
    """The protobuf forward_backward body (its `forward_only` marks a forward)."""
    request = wire.TinkerWireForwardBackwardRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise WireError(f"body: not a ForwardBackwardRequest message ({exc})") from exc
    with naming_the_call(request.model_id, request.seq_id):
        op = pb.ForwardBackwardOp(loss_fn=request.loss_fn, forward_only=request.forward_only)
        op.loss_fn_config.update(_proto_config(request))
        for i, datum in enumerate(request.data):
            tokens = _proto_tokens(i, datum)
            inputs = {
                key: _proto_tensor(tensor, f"data[{i}].loss_fn_inputs.{key}")
                for key, tensor in datum.loss_fn_inputs.items()
            }
            op.data.append(_datum(i, tokens, inputs))
    return pb.TrainingCall(model_id=request.model_id, seq_id=request.seq_id, forward_backward=op)


def from_json(
    model_id: str, seq_id: int, body: ForwardBackwardInputBody, forward_only: bool
) -> pb.TrainingCall:
    with naming_the_call(model_id, seq_id):
        op = pb.ForwardBackwardOp(loss_fn=body.loss_fn, forward_only=forward_only)
        op.loss_fn_config.update(_json_config(body.loss_fn_config or {}))
        for i, datum in enumerate(body.data):
            tokens = np.asarray(text_tokens(datum.model_input.chunks, f"data[{i}].model_input"))
            inputs = {
                key: _json_tensor(tensor, f"data[{i}].loss_fn_inputs.{key}")
                for key, tensor in datum.loss_fn_inputs.items()
            }
            op.data.append(_datum(i, tokens, inputs))
    return pb.TrainingCall(model_id=model_id, seq_id=seq_id, forward_backward=op)


def text_tokens(chunks: list[ChunkBody], where: str) -> list[int]:
    """A JSON ModelInput's tokens; any chunk but text is refused."""
    tokens: list[int] = []
    for chunk in chunks:
        if chunk.type != "encoded_text" or chunk.tokens is None:
            raise WireError(f"{where}: chunk type {chunk.type!r} is not served; {TEXT_ONLY}")
        tokens += chunk.tokens
    return tokens


def _proto_tokens(i: int, datum: wire.TinkerWireDatum) -> np.ndarray:
    parts = []
    for chunk in datum.model_input:
        kind = chunk.WhichOneof("chunk")
        if kind != "encoded_text":
            where = f"data[{i}].model_input"
            raise WireError(f"{where}: chunk type {kind or 'none'!r} is not served; {TEXT_ONLY}")
        parts.append(_buffer(chunk.encoded_text.tokens, np.dtype("<i4"), f"data[{i}].model_input"))
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _proto_config(request: wire.TinkerWireForwardBackwardRequest) -> dict[str, float]:
    # Clients write numbers to both maps and strings to v2 only: v2 is the whole config.
    if not request.loss_fn_config_v2:
        return _json_config(dict(request.loss_fn_config))
    config: dict[str, float | str] = {}
    for key, value in request.loss_fn_config_v2.items():
        config[key] = value.text if value.WhichOneof("value") == "text" else value.number
    return _json_config(config)


def _json_config(config: Mapping[str, float | str]) -> dict[str, float]:
    numbers: dict[str, float] = {}
    for key, value in config.items():
        if isinstance(value, str):
            raise WireError(f"loss_fn_config.{key}: a string; this server takes numbers only")
        if not math.isfinite(value):
            raise WireError(f"loss_fn_config.{key}: NaN or infinite")
        numbers[key] = float(value)
    return numbers


def _buffer(raw: bytes, dtype: np.dtype[Any], where: str) -> np.ndarray:
    if len(raw) % dtype.itemsize:
        raise WireError(f"{where}: {len(raw)} bytes is not a whole number of {dtype.name} values")
    return np.frombuffer(raw, dtype=dtype)


def _proto_tensor(tensor: wire.TinkerWireTensor, where: str) -> np.ndarray:
    dtype = PROTO_DTYPES.get(tensor.dtype)
    if dtype is None:
        name = DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype))
        raise WireError(f"{where}: dtype {name} is not served (float32 or int64)")
    shape = list(tensor.shape)
    if tensor.WhichOneof("encoding") == "sparse_csr":
        csr = tensor.sparse_csr
        values = _buffer(csr.values, dtype, where)
        crow = _buffer(csr.crow_indices, np.dtype("<i8"), where)
        col = _buffer(csr.col_indices, np.dtype("<i8"), where)
        return _dense(values, crow, col, shape, where)
    return _shaped(_buffer(tensor.dense, dtype, where), shape, where)


def _json_tensor(tensor: TensorBody, where: str) -> np.ndarray:
    dtype = JSON_DTYPES.get(tensor.dtype)
    if dtype is None:
        raise WireError(f"{where}: dtype {tensor.dtype!r} is not served (float32 or int64)")
    values = np.asarray(tensor.data, dtype=np.float64)
    if dtype.kind == "i":
        if not np.all(np.isfinite(values) & (values == np.round(values))):
            raise WireError(f"{where}: int64 values that are not integers")
        values = np.asarray(tensor.data, dtype=np.int64)
    shape = tensor.shape or []
    if tensor.sparse_crow_indices is not None or tensor.sparse_col_indices is not None:
        crow = np.asarray(tensor.sparse_crow_indices or [], dtype=np.int64)
        col = np.asarray(tensor.sparse_col_indices or [], dtype=np.int64)
        return _dense(values, crow, col, shape, where)
    return _shaped(values, shape, where)


def _shaped(values: np.ndarray, shape: list[int], where: str) -> np.ndarray:
    if not shape:
        return values
    if any(n < 0 for n in shape) or math.prod(shape) != values.size:
        raise WireError(f"{where}: shape {shape} does not hold its {values.size} values")
    return values.reshape(shape)


def _dense(
    values: np.ndarray, crow: np.ndarray, col: np.ndarray, shape: list[int], where: str
) -> np.ndarray:
    """A CSR tensor made dense; absent entries are 0 (the pad of loss inputs)."""
    if len(shape) != 2 or min(shape) < 0:
        raise WireError(f"{where}: a sparse CSR tensor needs a 2-D shape, not {shape}")
    rows, cols = shape
    counts = np.diff(crow)
    well_formed = (
        len(crow) == rows + 1
        and crow[0] == 0
        and crow[-1] == len(col) == len(values)
        and bool(np.all(counts >= 0))
        and bool(np.all((col >= 0) & (col < cols)))
    )
    if not well_formed:
        raise WireError(f"{where}: sparse CSR indices do not fit shape {shape}")
    dense = np.zeros(shape, dtype=values.dtype)
    dense[np.repeat(np.arange(rows), counts), col] = values
    return dense


def _datum(i: int, tokens: np.ndarray, inputs: Mapping[str, np.ndarray]) -> pb.Datum:
    """One datum: position p of `tokens` predicts target_tokens[p]; every other input is
    a float per position (the trainer refuses keys its loss does not read)."""
    datum = pb.Datum(tokens=tokens.tolist())
    for key, values in sorted(inputs.items()):
        where = f"data[{i}].loss_fn_inputs.{key}"
        if values.ndim == 0 or values.shape[0] != len(tokens):
            given = values.shape[0] if values.ndim else "a scalar"
            raise WireError(
                f"data[{i}]: loss_fn_inputs.{key} has {given} positions, "
                f"model_input has {len(tokens)}"
            )
        if key == TARGETS:
            if values.dtype.kind != "i" or values.ndim != 1:
                raise WireError(f"{where}: one int64 token per position expected")
            datum.target_tokens.extend(values.tolist())
            continue
        if not np.all(np.isfinite(values)):
            raise WireError(f"{where}: NaN or infinite values")
        floats = values.astype(np.float32)
        datum.inputs[key].values.extend(floats.ravel().tolist())
        datum.inputs[key].shape.extend(floats.shape)
    return datum
