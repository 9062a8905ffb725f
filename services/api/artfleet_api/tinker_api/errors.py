"""Errors of the Tinker-compatible API, in one place: the app's handlers
pass every exception raised under /api/v1 here. Bodies are `{"detail": ...}`, never
empty: its clients take a bare 400 for a dropped connection and send it again."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import grpc
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

PREFIX = "/api/v1"
HEARTBEAT = f"{PREFIX}/session_heartbeat"

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
    first (`data[2].loss_fn_inputs.weights: ...`)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


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
        return detail_response(exc.status, exc.message)
    if isinstance(exc, grpc.aio.AioRpcError):
        details = exc.details() or exc.code().name
        log.info("%s %s -> %s %s", request.method, path, exc.code().name, details)
        return detail_response(rpc_status(exc.code(), path), details)
    if isinstance(exc, RequestValidationError):
        return detail_response(400, validation_message(exc.errors()))
    if isinstance(exc, StarletteHTTPException):
        if exc.status_code == 404 and exc.detail == "Not Found":
            message = f"{request.method} {path} is not a route of this server"
            return detail_response(404, message)
        return detail_response(exc.status_code, str(exc.detail), exc.headers)
    log.exception("%s %s failed", request.method, path)
    return detail_response(500, f"internal error: {type(exc).__name__}")
