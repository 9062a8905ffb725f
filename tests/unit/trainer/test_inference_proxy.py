"""The art backend's inference proxy, in front of the torch backend's real inference server.

The upstream needs no model for these edges: listing models, its own error answers and its
auth are real, so the proxy's token check, header rewriting and status passing are too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio

from artfleet.runtime.service import free_port
from artfleet_trainer.backends.inference_proxy import InferenceProxy
from artfleet_trainer.torch_serving.server import InferenceServer

FLEET_TOKEN = "fleet-token-for-tests"
UPSTREAM_KEY = "upstream-key-for-tests"


@pytest_asyncio.fixture
async def upstream() -> AsyncIterator[str]:
    server = InferenceServer({}, api_key=UPSTREAM_KEY)
    port = await server.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await server.stop()


@pytest_asyncio.fixture
async def proxy() -> AsyncIterator[InferenceProxy]:
    proxy = InferenceProxy("127.0.0.1", 0, FLEET_TOKEN)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


async def _call(
    proxy: InferenceProxy, method: str, path: str, token: str | None = FLEET_TOKEN, body=b""
) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    url = f"http://127.0.0.1:{proxy.port}/v1{path}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, headers=headers, data=body) as reply,
    ):
        return reply.status, await reply.json()


async def test_without_upstream_answers_503(proxy: InferenceProxy) -> None:
    status, body = await _call(proxy, "GET", "/models")
    assert status == 503
    assert "no model" in body["error"]["message"]


@pytest.mark.parametrize("token", [None, "wrong", UPSTREAM_KEY])
async def test_refuses_anything_but_the_fleet_token(
    proxy: InferenceProxy, upstream: str, token: str | None
) -> None:
    proxy.set_upstream(upstream, UPSTREAM_KEY)
    status, _ = await _call(proxy, "GET", "/models", token=token)
    assert status == 401


async def test_forwards_with_the_upstream_key(proxy: InferenceProxy, upstream: str) -> None:
    proxy.set_upstream(upstream + "/", UPSTREAM_KEY)
    assert await _call(proxy, "GET", "/models") == (200, {"object": "list", "data": []})


async def test_passes_upstream_errors_through(proxy: InferenceProxy, upstream: str) -> None:
    proxy.set_upstream(upstream, UPSTREAM_KEY)
    request = b'{"model": "ghost@3", "messages": [{"role": "user", "content": "x"}]}'
    status, body = await _call(proxy, "POST", "/chat/completions", body=request)
    assert status == 404
    assert body["error"]["code"] == "model_not_found"


async def test_upstream_key_mismatch_is_the_upstreams_401(
    proxy: InferenceProxy, upstream: str
) -> None:
    proxy.set_upstream(upstream, "not-the-upstream-key")
    status, body = await _call(proxy, "GET", "/models")
    assert status == 401
    assert body["error"]["code"] == "invalid_api_key"


async def test_upstream_down_is_502(proxy: InferenceProxy) -> None:
    proxy.set_upstream(f"http://127.0.0.1:{free_port()}/v1", UPSTREAM_KEY)
    status, body = await _call(proxy, "GET", "/models")
    assert status == 502
    assert "upstream" in body["error"]["message"]
