"""An OpenAI-compatible reverse proxy on the trainer's inference port.

ART's LocalBackend binds vLLM to 127.0.0.1 on a port it picks, so rollout workers in other
containers cannot reach it. The trainer serves this proxy on `ARTFLEET_INFERENCE_HOST:PORT`
instead: it checks the fleet's bearer token, forwards `/v1/...` to the upstream with the
upstream's own key, and streams the answer back (server-sent events included). Until a job
has started vLLM there is no upstream and calls get 503.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import Counter

from artfleet.runtime.auth import bearer_matches, openai_error

log = logging.getLogger(__name__)

PROXY_REQUESTS = Counter(
    "artfleet_trainer_proxy_requests",
    "Requests through the trainer's inference proxy (art backend), by HTTP status",
    ["status"],
)

# Hop-by-hop headers (RFC 9110 §7.6.1) and the ones we set ourselves are not forwarded.
_DROP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "authorization",
        "content-length",
    }
)


def _forwardable(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _DROP}


class InferenceProxy:
    """`start()` binds host:port; `set_upstream()` points it at vLLM (or any OpenAI server)."""

    def __init__(self, host: str, port: int, token: str, timeout_s: float = 900.0) -> None:
        self.host = host
        self.port = port
        self._token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._upstream = ""
        self._upstream_key = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def started(self) -> bool:
        return self._runner is not None

    def set_upstream(self, base_url: str, api_key: str) -> None:
        """`base_url` ends in /v1, as ART's `model.inference_base_url` does."""
        self._upstream = base_url.rstrip("/")
        self._upstream_key = api_key
        log.info("inference proxy on %s:%d → %s", self.host, self.port, self._upstream)

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/v1/{tail:.*}", self._handle)
        self._session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:  # report the port the OS picked
            server = site._server
            sockets = getattr(server, "sockets", None) or []
            self.port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        response = await self._respond(request)
        PROXY_REQUESTS.labels(str(response.status)).inc()
        return response

    async def _respond(self, request: web.Request) -> web.StreamResponse:
        if not bearer_matches(request.headers.get("Authorization"), self._token):
            refusal = openai_error("bad or missing token", code="invalid_api_key")
            return web.json_response(refusal, status=401)
        if not self._upstream or self._session is None:
            idle = openai_error("no model is being served yet (no job has started)", "server_error")
            return web.json_response(idle, status=503)
        url = f"{self._upstream}/{request.match_info['tail']}"
        headers = _forwardable(request.headers)
        headers["Authorization"] = f"Bearer {self._upstream_key}"
        body = await request.read()
        reply: web.StreamResponse | None = None
        try:
            async with self._session.request(
                request.method, url, params=request.query, headers=headers, data=body
            ) as upstream:
                reply = web.StreamResponse(
                    status=upstream.status, headers=_forwardable(upstream.headers)
                )
                await reply.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await reply.write(chunk)
                await reply.write_eof()
                return reply
        except aiohttp.ClientError as exc:
            log.warning("inference upstream %s failed: %s", url, exc)
            if reply is not None and reply.prepared:  # mid-stream: the client sees a cut
                return reply
            return web.json_response(openai_error(f"upstream: {exc}", "server_error"), status=502)
