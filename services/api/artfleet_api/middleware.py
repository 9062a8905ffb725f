"""Bearer-token auth and request metrics, as ASGI middleware (every route, SSE included,
without per-handler code; a request's body checks are body_checks.py's). Open without a
token: /health, the console's static files and the API's description (/docs,
/openapi.json: no data, no secrets), so a browser opens them. Under /api/v1, the
Tinker-compatible API, the token may also come as its clients send it:
`X-API-Key: tml-<token>` (they refuse keys without that prefix) or `X-API-Key: <token>`."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from artfleet.runtime.auth import bearer_matches, secret_matches

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset(
    {"/health", "/", "/favicon.ico", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
)
OPEN_PREFIXES = ("/static/",)
API_KEY_PREFIX = "/api/v1/"

HTTP_REQUESTS = Counter(
    "artfleet_api_requests_total",
    "HTTP requests handled, by method, route template and status code",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "artfleet_api_request_seconds",
    "HTTP handling time (streams: until the stream ends)",
    ["method", "route"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
HTTP_IN_FLIGHT = Gauge("artfleet_api_requests_in_flight", "HTTP requests being handled")


def is_open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


async def refuse(
    send: Send,
    path: str,
    status: int,
    why: str,
    field: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    **extra: Any,
) -> None:
    """A middleware's own answer, in the body every error of the API has (`error`,
    `field`, `detail`); under /api/v1 `detail` is the message, as the Tinker-compatible
    protocol's other errors have it."""
    detail: Any = why if path.startswith(API_KEY_PREFIX) else []
    body = json.dumps({"error": why, "field": field, "detail": detail, **extra}).encode()
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *(headers or []),
        ],
    }
    await send(start)
    await send({"type": "http.response.body", "body": body})


class AuthMiddleware:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token
        self._keys = (token, f"tml-{token}") if token else ()

    def _refusal(self, path: str, headers: dict[bytes, bytes]) -> tuple[str, str] | None:
        """None when the request carries the token; else why not, and the header named."""
        given = headers.get(b"authorization", b"")
        ok = bearer_matches(given, self._token)
        if not path.startswith(API_KEY_PREFIX):
            why = "wrong bearer token" if given else "missing bearer token"
            return None if ok else (why, "Authorization")
        key = headers.get(b"x-api-key", b"")
        # Every comparison made, whichever matches: the time says nothing about the key.
        matches = [secret_matches(key, expected) for expected in self._keys]
        if ok or any(matches):
            return None
        return ("wrong API key" if key or given else "missing API key", "X-API-Key")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope["path"], dict(scope.get("headers") or []))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        why, field = refusal
        headers = [(b"www-authenticate", b"Bearer")]
        await refuse(send, scope["path"], 401, why, field, headers)


class MetricsMiddleware:
    """Labels by route template (`/jobs/{job_id}`), never the raw path: bounded series."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def record(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        started = time.monotonic()
        HTTP_IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, record)
        finally:
            HTTP_IN_FLIGHT.dec()
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope["method"]
            HTTP_REQUESTS.labels(method, template, str(status["code"])).inc()
            HTTP_SECONDS.labels(method, template).observe(time.monotonic() - started)
