"""A future's state as retrieve_future answers it. Forward/backward and sample results go
as protobuf to a client whose Accept names it (newer clients read those two only so),
else as JSON; pending, failed and every other result are JSON. A success body never
has a key named "error": clients take any body with one for a failure."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi.responses import JSONResponse, Response

from artfleet.v1 import tinker_api_pb2 as pb
from artfleet.v1 import tinker_wire_pb2 as wire
from artfleet_api.tinker_api.errors import WireError, detail_response

PROTOBUF = "application/x-protobuf"
CATEGORIES = ("user", "server", "unknown")
STOP_REASONS = {
    "stop": wire.TINKER_WIRE_STOP_REASON_STOP,
    "length": wire.TINKER_WIRE_STOP_REASON_LENGTH,
}


class BadResult(Exception):
    """A trainer result the protocol cannot carry: the future fails, naming why."""


def wants_protobuf(accept: str) -> bool:
    return PROTOBUF in accept.lower()


def respond(reply: pb.RetrieveResponse, request_id: str, accept: str) -> Response:
    kind = reply.WhichOneof("outcome")
    if kind == "pending":
        body = {"type": "try_again", "request_id": request_id, "queue_state": "active"}
        return JSONResponse(body)
    if kind == "failure":
        return _failure(reply.failure)
    if kind is None:
        raise WireError(f"the trainer answered nothing for {request_id}", status=502)
    protobuf = wants_protobuf(accept)
    try:
        return RESULTS[kind](getattr(reply, kind), protobuf)
    except BadResult as exc:
        return JSONResponse({"error": str(exc), "category": "server"})


def _failure(failure: pb.Failure) -> Response:
    message = failure.message or "the request failed"
    category = failure.category if failure.category in CATEGORIES else "unknown"
    if failure.retryable:  # lost on a trainer restart: clients send a sample again on 410
        return detail_response(410, message, category=category)
    return JSONResponse({"error": message, "category": category})


def _json(body: dict[str, Any]) -> Response:
    # allow_nan: a logprob can be -inf, which Python's JSON readers take.
    return Response(json.dumps(body, allow_nan=True), media_type="application/json")


def _create_model(result: pb.CreateModelResult, protobuf: bool) -> Response:
    return _json({"model_id": result.model_id, "type": "create_model"})


def _optim_step(result: pb.OptimStepResult, protobuf: bool) -> Response:
    return _json({"metrics": dict(result.metrics)})


def _save(result: pb.SaveResult, protobuf: bool) -> Response:
    # One result for both saves: a named save has a path, an ephemeral one a session.
    body = {"path": result.path, "sampling_session_id": result.sampling_session_id}
    return _json({k: v for k, v in body.items() if v})


def _load(result: pb.LoadResult, protobuf: bool) -> Response:
    body = {"model_id": result.model_id, "path": result.path, "type": "load_weights"}
    return _json({k: v for k, v in body.items() if v})


def _shape(array: pb.FloatArray) -> list[int]:
    return list(array.shape) or [len(array.values)]


def _forward_backward(result: pb.ForwardBackwardResult, protobuf: bool) -> Response:
    for key in result.metrics:
        if key.count(":") != 1:  # clients split every key into name and reduction
            raise BadResult(f"the trainer's metric {key!r} is not 'name:reduction'")
    if protobuf:
        output = forward_backward_message(result)
        return Response(output.SerializeToString(), media_type=PROTOBUF)
    outputs = [
        {"logprobs": {"data": list(a.values), "dtype": "float32", "shape": _shape(a)}}
        for a in result.logprobs
    ]
    body = {"loss_fn_output_type": "ArrayRecord", "loss_fn_outputs": outputs}
    return _json({**body, "metrics": dict(result.metrics)})


def forward_backward_message(
    result: pb.ForwardBackwardResult,
) -> wire.TinkerWireForwardBackwardOutput:
    """Per-datum logprobs batched: one record per run of datums of the same trailing
    shape, data concatenated, offsets in bytes."""
    output = wire.TinkerWireForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    output.metrics.update(result.metrics)
    runs: list[tuple[list[int], list[np.ndarray]]] = []
    for array in result.logprobs:
        shape = _shape(array)
        values = np.asarray(array.values, dtype="<f4")
        if runs and runs[-1][0] == shape[1:]:
            runs[-1][1].append(values)
        else:
            runs.append((shape[1:], [values]))
    for trailing, arrays in runs:
        record = output.loss_fn_outputs.add(num_datums=len(arrays))
        batched = record.fields["logprobs"]
        batched.dtype = wire.TINKER_WIRE_DTYPE_FLOAT32
        batched.trailing_shape.extend(trailing)
        batched.data = b"".join(a.tobytes() for a in arrays)
        offsets = np.cumsum([0] + [a.nbytes for a in arrays], dtype="<i8")
        batched.offsets = offsets.tobytes()
    return output


def _sample(result: pb.SampleResult, protobuf: bool) -> Response:
    for sequence in result.sequences:
        if sequence.stop_reason not in STOP_REASONS:
            raise BadResult(f"the trainer's stop reason {sequence.stop_reason!r}")
    if protobuf:
        return Response(sample_message(result).SerializeToString(), media_type=PROTOBUF)
    sequences = [
        {"stop_reason": s.stop_reason, "tokens": list(s.tokens), "logprobs": list(s.logprobs)}
        for s in result.sequences
    ]
    prompt = [None if math.isnan(v) else v for v in result.prompt_logprobs] or None
    return _json({"type": "sample", "sequences": sequences, "prompt_logprobs": prompt})


def sample_message(result: pb.SampleResult) -> wire.TinkerWireSampleResponse:
    response = wire.TinkerWireSampleResponse()
    for sequence in result.sequences:
        response.sequences.add(
            stop_reason=STOP_REASONS[sequence.stop_reason],
            tokens=np.asarray(sequence.tokens, dtype="<i4").tobytes(),
            logprobs=np.asarray(sequence.logprobs, dtype="<f4").tobytes(),
        )
    if result.prompt_logprobs:
        response.prompt_logprobs = np.asarray(result.prompt_logprobs, dtype="<f4").tobytes()
    return response


RESULTS: dict[str, Callable[[Any, bool], Response]] = {
    "create_model": _create_model,
    "forward_backward": _forward_backward,
    "optim_step": _optim_step,
    "save": _save,
    "load": _load,
    "sample": _sample,
}
