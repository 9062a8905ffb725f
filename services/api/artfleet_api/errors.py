"""Every error as a JSON body naming the field: request validation (422; a body that is not
JSON at all: 400 naming `body`), our spec errors (422), and the gRPC status of the service
behind (mapped once, here). A body's size and type are refused before it is read
(body_checks.py). Under /api/v1 the Tinker-compatible API has its own statuses and bodies:
tinker_api/errors.py answers there."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.base import FieldError
from artfleet_api.body_checks import json_decode_error
from artfleet_api.models import TRAIN_BODY_TAGS
from artfleet_api.tinker_api import errors as tinker_api_errors

log = logging.getLogger(__name__)

GRPC_TO_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: 422,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.UNAUTHENTICATED: 502,  # our token was refused behind us: not the client's
    grpc.StatusCode.PERMISSION_DENIED: 502,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class ApiError(Exception):
    """An error a handler raises on purpose: status, message, the field it is about."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def error_body(message: str, field: str | None = None, detail: list[Any] | None = None) -> Any:
    return {"error": message, "field": field, "detail": detail or []}


def _loc_field(loc: tuple[Any, ...]) -> str:
    if len(loc) > 1 and loc[0] == "body" and loc[1] in TRAIN_BODY_TAGS:
        loc = (loc[0], *loc[2:])  # which form of the body: not a field
    parts = [p for p in loc if p not in ("body", "query", "path", "header")]
    path = ""
    for part in parts:  # list positions are ints; a key like "2048" stays a key
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or ".".join(str(p) for p in loc)


def _detail(error: Any) -> dict[str, str]:
    """One validation error as {field, message}; a spec validator's own complaint (a
    FieldError: `environments.NAME.KEY`) names its field below the one pydantic names."""
    loc, message = tuple(error.get("loc", ())), str(error.get("msg", ""))
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        loc, message = loc + cause.loc, cause.message
    return {"field": _loc_field(loc), "message": message}


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    if tinker_api_errors.owns(request):
        return await tinker_api_errors.handle(request, exc)
    assert isinstance(exc, RequestValidationError)
    not_json = json_decode_error(exc.errors())
    if not_json is not None:  # pydantic locates it at a character offset: not a field
        return JSONResponse(error_body(not_json, "body"), status_code=400)
    detail = [_detail(e) for e in exc.errors()]
    field = detail[0]["field"] if detail else None
    message = f"{field}: {detail[0]['message']}" if detail else "invalid request"
    return JSONResponse(error_body(message, field, detail), status_code=422)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return JSONResponse(error_body(exc.message, exc.field), status_code=exc.status)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, InvalidArgument)
    return JSONResponse(error_body(exc.message, exc.field or None), status_code=422)


async def _rpc(request: Request, exc: Exception) -> JSONResponse:
    if tinker_api_errors.owns(request):
        return await tinker_api_errors.handle(request, exc)
    assert isinstance(exc, grpc.aio.AioRpcError)
    status = GRPC_TO_HTTP.get(exc.code(), 502)
    details = exc.details() or exc.code().name
    field = details.split(":", 1)[0] if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else None
    log.info("%s %s -> %s %s", request.method, request.url.path, exc.code().name, details)
    return JSONResponse(error_body(f"{exc.code().name}: {details}", field), status_code=status)


async def _http(request: Request, exc: Exception) -> JSONResponse:
    if tinker_api_errors.owns(request):
        return await tinker_api_errors.handle(request, exc)
    assert isinstance(exc, StarletteHTTPException)
    field = "body" if exc.status_code == 400 else None  # FastAPI: the body is not JSON
    return JSONResponse(
        error_body(str(exc.detail), field), status_code=exc.status_code, headers=exc.headers
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    if tinker_api_errors.owns(request):
        return await tinker_api_errors.handle(request, exc)
    log.exception("%s %s failed", request.method, request.url.path)
    return JSONResponse(error_body(f"internal error: {type(exc).__name__}"), status_code=500)


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(InvalidArgument, _invalid)
    app.add_exception_handler(grpc.aio.AioRpcError, _rpc)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(tinker_api_errors.WireError, tinker_api_errors.handle)
    app.add_exception_handler(Exception, _unexpected)
