"""Channels that carry the API token (and a request id) on every call."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import grpc

from artfleet.runtime.rpc.server import MAX_MESSAGE_BYTES

CHANNEL_OPTIONS: Sequence[tuple[str, Any]] = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # A service restarted (by `fleet up`, compose, Kubernetes) or still starting (the API
    # starts before the trainer) is reached within seconds of serving: gRPC's backoff
    # between connection attempts otherwise grows to 120 s while it is down.
    ("grpc.max_reconnect_backoff_ms", 5_000),
)


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"), ("x-request-id", uuid.uuid4().hex[:12]))


class _AioAuth:
    def __init__(self, token: str) -> None:
        self._token = token

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = list(details.metadata or ()) + list(auth_metadata(self._token))
        return grpc.aio.ClientCallDetails(
            details.method,
            details.timeout,
            grpc.aio.Metadata(*metadata),
            details.credentials,
            details.wait_for_ready,
        )


# grpc.aio files an interceptor under the first call kind it implements only: one class each.
class _AioUnaryAuth(_AioAuth, grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


class _AioStreamAuth(_AioAuth, grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


def aio_channel(target: str, token: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        target,
        options=list(CHANNEL_OPTIONS),
        interceptors=[_AioUnaryAuth(token), _AioStreamAuth(token)],
    )


class _SyncDetails(grpc.ClientCallDetails):
    def __init__(self, base: grpc.ClientCallDetails, metadata: Sequence[tuple[str, str]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class _SyncAuth(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, token: str) -> None:
        self._token = token

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = list(details.metadata or ()) + list(auth_metadata(self._token))
        return _SyncDetails(details, metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)


def sync_channel(target: str, token: str) -> grpc.Channel:
    channel = grpc.insecure_channel(target, options=list(CHANNEL_OPTIONS))
    return grpc.intercept_channel(channel, _SyncAuth(token))
