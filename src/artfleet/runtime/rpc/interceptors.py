"""Cross-cutting concerns of every RPC: token auth, request ids, metrics, error mapping."""

from __future__ import annotations

import logging
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from google.protobuf.message import DecodeError
from grpc.aio import ServerInterceptor

from artfleet.contracts.errors import ArtfleetError, InvalidArgument
from artfleet.runtime.auth import bearer_matches
from artfleet.runtime.logs import request_id
from artfleet.runtime.metrics import RPC_REQUESTS, RPC_SECONDS

log = logging.getLogger(__name__)

# Probes and tooling must work without the token: health checks (compose, load balancers)
# and reflection (grpcurl) carry no secrets.
PUBLIC_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")

Handler: TypeAlias = grpc.RpcMethodHandler


def _metadata(details: grpc.HandlerCallDetails) -> dict[str, str]:
    pairs = details.invocation_metadata or ()
    return {k.lower(): v for k, v in pairs if isinstance(v, str)}


def _abort_handler(code: grpc.StatusCode, message: str) -> Handler:
    async def abort(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, message)

    return grpc.unary_unary_rpc_method_handler(abort)


class _Undecodable:
    """What a request that is not a valid message (corrupt wire format, bad UTF-8 in a
    string field) becomes, so the handler can refuse it as INVALID_ARGUMENT: grpc would
    otherwise answer UNKNOWN with an internal-looking message."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _lenient(deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserialize is None:  # raw bytes handlers (the auth refusal) parse nothing
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except DecodeError as exc:
            return _Undecodable(str(exc))

    return parse


async def _refuse_undecodable(request: Any, context: grpc.aio.ServicerContext) -> None:
    if isinstance(request, _Undecodable):
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"request is not a valid message: {request.reason}"
        )


class AuthInterceptor(ServerInterceptor):
    """Rejects calls without `authorization: Bearer <token>` (artfleet.runtime.auth)."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        details: grpc.HandlerCallDetails,
    ) -> Handler:
        method: str = details.method
        if method.startswith(PUBLIC_SERVICES):
            return await continuation(details)
        given = _metadata(details).get("authorization", "")
        if not bearer_matches(given, self._token):
            reason = "missing" if not given else "invalid"
            return _abort_handler(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{reason} API token: send 'authorization: Bearer <ARTFLEET_API_TOKEN>'",
            )
        return await continuation(details)


class ObservabilityInterceptor(ServerInterceptor):
    """Request id, RPC metrics and error mapping, wrapped around every handler."""

    def __init__(self, service: str) -> None:
        self._service = service

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(details)
        if handler is None:
            return handler
        method = details.method.rsplit("/", 1)[-1]
        rid = _metadata(details).get("x-request-id") or uuid.uuid4().hex[:12]
        if handler.unary_unary is not None:
            return handler._replace(
                unary_unary=self._wrap_unary(handler.unary_unary, method, rid),
                request_deserializer=_lenient(handler.request_deserializer),
            )
        if handler.unary_stream is not None:
            return handler._replace(
                unary_stream=self._wrap_stream(handler.unary_stream, method, rid),
                request_deserializer=_lenient(handler.request_deserializer),
            )
        if handler.stream_stream is not None and not method.startswith("ServerReflection"):
            return handler._replace(
                stream_stream=self._wrap_bidi(handler.stream_stream, method, rid),
                request_deserializer=_lenient(handler.request_deserializer),
            )
        return handler  # reflection: grpc's own parsing

    def _wrap_unary(self, fn: Any, method: str, rid: str) -> Any:
        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            request_id.set(rid)
            start = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                await _refuse_undecodable(request, context)
                return await fn(request, context)
            except BaseException as exc:
                code = await _map_error(exc, context, rid)
                raise
            finally:
                self._observe(method, context, code, start)

        return wrapped

    def _wrap_stream(self, fn: Any, method: str, rid: str) -> Any:
        async def items(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await _refuse_undecodable(request, context)
            async for item in fn(request, context):
                yield item

        return self._observed(items, method, rid)

    def _wrap_bidi(self, fn: Any, method: str, rid: str) -> Any:
        async def checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
            # An undecodable message mid-stream ends the call as INVALID_ARGUMENT (raised
            # where the handler reads it; _map_error turns it into the status).
            async for request in requests:
                if isinstance(request, _Undecodable):
                    raise InvalidArgument(f"request is not a valid message: {request.reason}")
                yield request

        return self._observed(lambda requests, context: fn(checked(requests), context), method, rid)

    def _observed(self, items: Any, method: str, rid: str) -> Any:
        """A streaming handler (an async generator function: grpc tells them by that) that
        yields `items(request_or_requests, context)` with the request id set, errors mapped
        and the call observed."""

        async def handler(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            request_id.set(rid)
            start = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                async for item in items(request, context):
                    yield item
            except BaseException as exc:
                code = await _map_error(exc, context, rid)
                raise
            finally:
                self._observe(method, context, code, start)

        return handler

    def _observe(
        self, method: str, context: grpc.aio.ServicerContext, code: grpc.StatusCode, start: float
    ) -> None:
        set_code = context.code()
        final = set_code if isinstance(set_code, grpc.StatusCode) else code
        RPC_REQUESTS.labels(self._service, method, final.name).inc()
        RPC_SECONDS.labels(self._service, method).observe(time.perf_counter() - start)


async def _map_error(
    exc: BaseException, context: grpc.aio.ServicerContext, rid: str
) -> grpc.StatusCode:
    """Turns our errors into statuses, an unreachable Redis into UNAVAILABLE, and anything
    unexpected into INTERNAL (logged)."""
    if isinstance(exc, grpc.aio.AbortError):
        code = context.code()
        return code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN
    if isinstance(exc, ArtfleetError):
        await context.abort(exc.code, bounded_details(exc.message))
    if _store_unreachable(exc):
        # A Redis restart is an outage the caller can wait out, not a bug: UNAVAILABLE is
        # what clients (and grpc's retry policies) retry on.
        log.warning("RPC met an unreachable Redis: %s", exc)
        await context.abort(
            grpc.StatusCode.UNAVAILABLE,
            f"the fleet's Redis is unreachable ({type(exc).__name__}: {exc}); try again "
            f"shortly; request id {rid}",
        )
    if isinstance(exc, Exception):
        log.exception("unhandled error in RPC")
        await context.abort(
            grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); request id {rid}"
        )
    return grpc.StatusCode.CANCELLED


# A status message travels as a trailer, percent-encoded (up to 3 bytes per byte), and a
# trailer past the client's metadata limit (8 KiB by default) ends the call as UNAVAILABLE
# instead of our status: messages that quote the input (a 300 kB name) are cut to fit.
MAX_DETAILS_BYTES = 2048


def bounded_details(message: str) -> str:
    """`message`, cut to MAX_DETAILS_BYTES of UTF-8 (with a mark saying so)."""
    data = message.encode()
    if len(data) <= MAX_DETAILS_BYTES:
        return message
    cut = data[: MAX_DETAILS_BYTES - 40].decode(errors="ignore")
    return f"{cut}... ({len(data)} bytes, cut)"


def _store_unreachable(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from) says Redis cannot be reached now:
    refused, reset, timed out or still loading its data after a restart. Read from
    `sys.modules`: services without Redis never import it, and then no error is one."""
    exceptions = sys.modules.get("redis.exceptions")
    if exceptions is None:
        return False
    kinds = (exceptions.ConnectionError, exceptions.TimeoutError)
    seen: BaseException | None = exc
    for _ in range(4):  # a wrapped error (raise ... from redis_error) counts too
        if seen is None:
            return False
        if isinstance(seen, kinds):
            return True
        seen = seen.__cause__
    return False
