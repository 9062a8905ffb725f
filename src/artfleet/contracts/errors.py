"""Errors that carry their gRPC status: raised anywhere, mapped once by the interceptor."""

from __future__ import annotations

import grpc


class ArtfleetError(Exception):
    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(ArtfleetError):
    """Bad input; `field` names the offending field (dotted path) when there is one."""

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


class NotFound(ArtfleetError):
    code = grpc.StatusCode.NOT_FOUND


class FailedPrecondition(ArtfleetError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(ArtfleetError):
    code = grpc.StatusCode.UNAVAILABLE


class ResourceExhausted(ArtfleetError):
    """A configured limit is reached; the message names the limit (its setting)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED
