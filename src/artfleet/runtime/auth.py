"""The fleet token check every API runs (the gRPC interceptor, the HTTP API, the inference
front, the trainer's policy server and inference proxy), and the OpenAI-style error body
the OpenAI-compatible servers answer with.

`Authorization: Bearer <token>` is read as RFC 7235/6750 have it: the scheme in any case,
one or more spaces before the credentials, whitespace around the value ignored. The token
is compared in constant time, and an empty configured token matches nothing (the settings
refuse one; a server built without them must not open up).
"""

from __future__ import annotations

import hmac
from typing import Any

BEARER = b"bearer"


def _raw(value: str | bytes) -> bytes:
    # surrogatepass: any str encodes; a header that was not UTF-8 cannot equal a token.
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")


def secret_matches(given: str | bytes, secret: str) -> bool:
    """Whether `given` is exactly `secret`, compared in constant time; never for an empty
    secret."""
    expected = secret.encode()
    return hmac.compare_digest(_raw(given), expected) and bool(expected)


def bearer_credentials(header: str | bytes | None) -> bytes | None:
    """The credentials of a `Bearer` Authorization value (any case, any spaces), or None
    when it is missing or names another scheme."""
    parts = _raw(header or b"").strip().split(None, 1)
    if len(parts) != 2 or parts[0].lower() != BEARER:
        return None
    return parts[1]


def bearer_matches(header: str | bytes | None, token: str) -> bool:
    """Whether an Authorization value carries `token` as its Bearer credentials."""
    credentials = bearer_credentials(header)
    # The compare runs for every value: the time says nothing about how the value failed.
    matched = secret_matches(b"" if credentials is None else credentials, token)
    return matched and credentials is not None


def openai_error(
    message: str,
    type: str = "invalid_request_error",
    *,
    code: str | int | None = None,
    param: str | None = None,
) -> dict[str, Any]:
    """An OpenAI-style error body: `{"error": {"message", "type", "code", "param"}}`."""
    return {"error": {"message": message, "type": type, "code": code, "param": param}}
