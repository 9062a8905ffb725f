"""The Tinker-compatible API under /api/v1: sessions, training and
sampling calls (queued on the trainer, answered with a future at once) and
retrieve_future. Runs and checkpoints: rest.py; routes this server refuses: refused.py.
Auth is the app's middleware; gRPC errors map onto HTTP in errors.py."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import ValidationError

from artfleet.v1 import tinker_api_pb2 as pb
from artfleet_api.body_checks import not_json
from artfleet_api.tinker_api import bodies as b
from artfleet_api.tinker_api import fwdbwd, refused, rest, results, wire
from artfleet_api.tinker_api.deps import Api, TinkerApi
from artfleet_api.tinker_api.errors import (
    PREFIX,
    WireError,
    call_of,
    naming_the_call,
    validation_message,
)

# Out of the OpenAPI schema: the contract is Tinker's client (protobuf bodies included),
# and a schema fuzzer must not create training clients on the trainer.
router = APIRouter(prefix=PREFIX, include_in_schema=False)

# What the client asks first. Off: token exchange, its own HTTP transport, compressed and
# parallel forward_backward chunks, and the optional routes refused.py names.
CLIENT_CONFIG = {
    "pjwt_auth_enabled": False,
    "use_pyqwest_transport": False,
    "proto_compress_fwdbwd": False,
    "parallel_fwdbwd_chunks": False,
    "sample_use_retrieve_futures": False,
    "custom_loss_server_side": False,
    "sample_join_sampling_session": False,
}


async def _submit(api: TinkerApi, call: pb.TrainingCall) -> dict[str, Any]:
    promise = await api.stub.Submit(call, timeout=api.timeout_s)
    return {"request_id": promise.request_id, "model_id": promise.model_id or None}


@router.post("/client/config")
async def client_config() -> dict[str, Any]:
    return CLIENT_CONFIG


@router.post("/client/dynamic_config")
async def client_dynamic_config() -> dict[str, Any]:
    return {}


@router.get("/healthz")
async def healthz() -> dict[str, Any]:
    return {"status": "ok"}


@router.post("/telemetry")
async def telemetry() -> dict[str, Any]:
    """Accepted and dropped: the fleet has its own metrics."""
    return {"status": "accepted"}


@router.post("/create_session")
async def create_session(body: b.CreateSessionBody, api: Api) -> dict[str, Any]:
    reply = await api.stub.CreateSession(wire.session_request(body), timeout=api.timeout_s)
    return {"type": "create_session", "session_id": reply.session_id}


@router.post("/session_heartbeat")
async def session_heartbeat(body: b.HeartbeatBody, api: Api) -> dict[str, Any]:
    """410 once the session is finished or expired: the client stops its heartbeat."""
    request = pb.SessionHeartbeatRequest(session_id=body.session_id)
    await api.stub.Heartbeat(request, timeout=api.timeout_s)
    return {"type": "session_heartbeat"}


@router.post("/sessions/{session_id}/finish")
async def finish_session(session_id: str, body: b.FinishBody, api: Api) -> dict[str, Any]:
    request = pb.FinishSessionRequest(session_id=session_id, reason=body.reason.type)
    await api.stub.FinishSession(request, timeout=api.timeout_s)
    return {}


@router.post("/create_model")
async def create_model(body: b.CreateModelBody, api: Api) -> dict[str, Any]:
    return await _submit(api, wire.create_model_call(body))


@router.post("/get_info")
async def get_info(body: b.ModelIdBody, api: Api) -> dict[str, Any]:
    info = await api.stub.GetInfo(pb.GetInfoRequest(model_id=body.model_id), timeout=api.timeout_s)
    return wire.info_json(info)


@router.post("/forward")
async def forward(body: b.ForwardBody, api: Api) -> dict[str, Any]:
    """Older clients' forward pass (newer ones mark forward_backward forward_only)."""
    call = fwdbwd.from_json(body.model_id, body.seq_id, body.forward_input, forward_only=True)
    return await _submit(api, call)  # from_json names the call in a refusal


@router.post("/forward_backward")
async def forward_backward(request: Request, api: Api) -> dict[str, Any]:
    """A ForwardBackwardRequest message (`Content-Type: application/x-protobuf`, newer
    clients) or the JSON body of older ones."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":  # client/config offers no compression
        raise WireError(f"Content-Encoding: {encoding!r} is not accepted", status=415)
    raw = await request.body()  # its type and size are body_checks.py's
    if results.PROTOBUF in request.headers.get("content-type", "").lower():
        return await _submit(api, fwdbwd.from_proto(raw))
    try:  # json, not pydantic's parser: NaN parses, to be refused by name
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise WireError(not_json(exc.msg, exc.pos)) from exc
    except ValueError as exc:  # not UTF-8 text
        raise WireError(not_json(str(exc), None)) from exc
    try:
        body = b.ForwardBackwardBody.model_validate(data)
    except ValidationError as exc:
        raise WireError(validation_message(exc.errors()), call=call_of(data)) from exc
    call = fwdbwd.from_json(
        body.model_id, body.seq_id, body.forward_backward_input, forward_only=False
    )
    return await _submit(api, call)


@router.post("/optim_step")
async def optim_step(body: b.OptimStepBody, api: Api) -> dict[str, Any]:
    with naming_the_call(body.model_id, body.seq_id):
        call = wire.optim_step_call(body)
    return await _submit(api, call)


@router.post("/save_weights")
async def save_weights(body: b.SaveWeightsBody, api: Api) -> dict[str, Any]:
    with naming_the_call(body.model_id, body.seq_id):
        call = wire.save_weights_call(body)
    return await _submit(api, call)


@router.post("/save_weights_for_sampler")
async def save_weights_for_sampler(body: b.SaveForSamplerBody, api: Api) -> dict[str, Any]:
    with naming_the_call(body.model_id, body.seq_id):
        call = wire.save_for_sampler_call(body)
    return await _submit(api, call)


@router.post("/load_weights")
async def load_weights(body: b.LoadWeightsBody, api: Api) -> dict[str, Any]:
    """Onto a model (model_id, seq_id), or creating one (session_id, model_seq_id): the
    client then takes the model id `<session_id>:train:<model_seq_id>` for granted."""
    with naming_the_call(body.model_id, body.seq_id):
        call, model_id = wire.load_weights_call(body)
    promise = await _submit(api, call)
    if model_id is not None:
        named = promise["model_id"]
        if named not in (None, model_id):
            raise WireError(f"the trainer named the model {named!r}, not {model_id!r}", 502)
        promise["model_id"] = model_id
    return promise


@router.post("/create_sampling_session")
async def create_sampling_session(body: b.CreateSamplingSessionBody, api: Api) -> dict[str, Any]:
    request = wire.sampling_session_request(body)
    session = await api.stub.CreateSamplingSession(request, timeout=api.timeout_s)
    return {"type": "create_sampling_session", "sampling_session_id": session.sampling_session_id}


@router.post("/asample")
async def asample(body: b.SampleBody, api: Api) -> dict[str, Any]:
    """The promise names each sample's sequence (newer clients require one per sample)."""
    promise = await api.stub.Submit(wire.sample_call(body), timeout=api.timeout_s)
    ids = list(promise.sample_sequence_ids)
    if len(ids) != body.num_samples:
        message = f"the trainer's promise names {len(ids)} sequences for {body.num_samples}"
        raise WireError(message, status=502)
    return {"request_id": promise.request_id, "sample_sequence_ids": ids}


@router.post("/retrieve_future", response_class=Response)
async def retrieve_future(body: b.RetrieveBody, request: Request, api: Api) -> Response:
    """Held while the future is pending, for less than the client's read timeout; then
    `try_again`, which the client answers with its next poll at once."""
    query = pb.RetrieveRequest(request_id=body.request_id, wait_s=api.wait_s)
    timeout = api.wait_s + min(api.timeout_s, 10.0)
    # wait_for_ready: a poll during a trainer restart waits for it (504 at worst), where
    # a 503 at once would have the client poll again at once, in a tight loop.
    reply = await api.stub.Retrieve(query, timeout=timeout, wait_for_ready=True)
    return results.respond(reply, body.request_id, request.headers.get("accept", ""))


router.include_router(rest.router)
router.include_router(refused.router)
