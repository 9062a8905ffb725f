"""Errors of the Tinker-compatible API, in one place: the app's handlers
pass every exception raised under /api/v1 here. Bodies are `{"detail": ...}`, never
empty: its clients take a bare 400 for a dropped connection and send it again."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any

import grpc
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from artfleet.v1 import tinker_api_pb2 as pb
from artfleet_api.body_checks import json_decode_error

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
HEARTBEAT = f"{PREFIX}/session_heartbeat"
# Routes of a training client's numbered calls (model_id, seq_id): one refused here is
# passed over in the client's order at the trainer (`pass_over`).
CLIENT_CALLS = frozenset(
    f"{PREFIX}/{name}"
    for name in (
        "forward",
        "forward_backward",
        "optim_step",
        "save_weights",
        "save_weights_for_sampler",
        "load_weights",
    )
)

GRPC_TO_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    # Clients retry a 409 for minutes: an existing name is a plain refusal instead.
    grpc.StatusCode.ALREADY_EXISTS: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class WireError(Exception):
    """A request the Tinker-compatible API refuses, naming what is wrong
    first (`data[2].loss_fn_inputs.weights: ...`). `call`: the training client's call it
    refuses (model_id, seq_id), when the request names one."""

    def __init__(self, message: str, status: int = 400, call: tuple[str, int] | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.call = call


def call_of(body: Any) -> tuple[str, int] | None:
    """The (model_id, seq_id) a training call's JSON body names, if it names both."""
    if not isinstance(body, Mapping):
        return None
    model_id, seq_id = body.get("model_id"), body.get("seq_id")
    if isinstance(model_id, str) and isinstance(seq_id, int) and not isinstance(seq_id, bool):
        return model_id, seq_id
    return None


@contextmanager
def naming_the_call(model_id: str | None, seq_id: int | None) -> Iterator[None]:
    """A refusal inside names the client call it refuses (passed over at the trainer);
    a request that names no call (a load that creates a client) names none."""
    try:
        yield
    except WireError as exc:
        if exc.call is None and model_id is not None and seq_id is not None:
            exc.call = (model_id, seq_id)
        raise


async def pass_over(request: Request, call: tuple[str, int], reason: str) -> None:
    """Tell the trainer a client's call was refused here: the SDK has numbered its next
    call after it, and the trainer runs a client's calls in that order. Best effort: an
    unknown client or an unreachable trainer changes nothing for this answer."""
    model_id, seq_id = call
    message = pb.TrainingCall(
        model_id=model_id, seq_id=seq_id, pass_over=pb.PassOverOp(reason=reason)
    )
    try:
        stub = request.app.state.backends.tinker_api
        await stub.Submit(message, timeout=request.app.state.settings.rpc_timeout_s)
    except grpc.aio.AioRpcError as exc:
        log.info("pass over %s seq_id %d: %s", model_id, seq_id, exc.code().name)


def owns(request: Request) -> bool:
    path: str = request.scope.get("path", "")
    return path == PREFIX or path.startswith(PREFIX + "/")


def rpc_status(code: grpc.StatusCode, path: str) -> int:
    # A finished session's heartbeat: 410 is what stops the client's heartbeat loop.
    if code == grpc.StatusCode.FAILED_PRECONDITION and path == HEARTBEAT:
        return 410
    return GRPC_TO_HTTP.get(code, 500)


def detail_response(
    status: int, message: str, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    text = message or HTTPStatus(status).phrase
    return JSONResponse({"detail": text, **extra}, status_code=status, headers=headers)


def validation_message(errors: Any) -> str:
    """Pydantic's first complaint as `field.path: message`."""
    first = next(iter(errors), None)
    if first is None:
        return "invalid request body"
    loc = list(first.get("loc", ()))
    if loc and loc[0] in ("body", "query", "path", "header"):  # where, not which field
        loc = loc[1:]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    return f"{where or 'body'}: {first.get('msg', 'invalid')}"


async def handle(request: Request, exc: Exception) -> JSONResponse:
    path = request.scope.get("path", "")
    if isinstance(exc, WireError):
        if exc.call is not None and exc.status < 500:
            await pass_over(request, exc.call, exc.message)
        return detail_response(exc.status, exc.message)
    if isinstance(exc, grpc.aio.AioRpcError):
        details = exc.details() or exc.code().name
        log.info("%s %s -> %s %s", request.method, path, exc.code().name, details)
        return detail_response(rpc_status(exc.code(), path), details)
    if isinstance(exc, RequestValidationError):
        not_json = json_decode_error(exc.errors())
        if not_json is not None:  # no call to pass over: the body names none readably
            return detail_response(400, not_json)
        message = validation_message(exc.errors())
        call = call_of(exc.body) if path in CLIENT_CALLS else None
        if call is not None:
            await pass_over(request, call, message)
        return detail_response(400, message)
    if isinstance(exc, StarletteHTTPException):
        if exc.status_code == 404 and exc.detail == "Not Found":
            message = f"{request.method} {path} is not a route of this server"
            return detail_response(404, message)
        return detail_response(exc.status_code, str(exc.detail), exc.headers)
    log.exception("%s %s failed", request.method, path)
    return detail_response(500, f"internal error: {type(exc).__name__}")
