"""A request's body, as the API served on a free port (uvicorn, port 0) takes it, before a
fake trainer (tests/support/tinker_api_fake.py): every route bounds its size (413 naming
the limit and its setting, on the Content-Length before the body is sent, or counted for a
chunked body), every body must be JSON (415 naming what is expected; forward_backward also
takes protobuf), a body that does not parse is 400 without a character offset for a field,
and an empty or over-long Idempotency-Key is 422 naming the header."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from tinker_api_fake import TOKEN, Front, tinker_api_front

from artfleet_api.app import create_app
from artfleet_api.body_checks import DATA_ROUTES

AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"content-type": "application/json"}
SMALL = 64 * 1024  # the ordinary limit the tests set (ARTFLEET_MAX_BODY_BYTES)
DATA = 256 * 1024  # the data routes' (ARTFLEET_MAX_DATA_BODY_BYTES)


@pytest.fixture
async def front() -> AsyncIterator[Front]:
    async with tinker_api_front(served=True) as front:
        yield front


@pytest.fixture
async def small() -> AsyncIterator[Front]:
    """Limits small enough to send past quickly."""
    async with tinker_api_front(
        served=True, max_body_bytes=SMALL, max_data_body_bytes=DATA
    ) as front:
        yield front


def _tags(size: int) -> bytes:
    """A create_session body of `size` bytes."""
    head, tail = b'{"tags": ["', b'"]}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def _assert_413(response: httpx.Response, limit: int, setting: str) -> None:
    assert response.status_code == 413, response.text
    body = response.json()
    assert body["limit_bytes"] == limit and body["setting"] == setting, body
    assert setting in body["error"] and body["field"] == "body"


async def test_a_50_mb_body_is_413_naming_the_limit_and_its_setting(front: Front) -> None:
    big = _tags(50 * 1024 * 1024)
    tinker = await front.client.post("/api/v1/create_session", content=big, headers=JSON)
    _assert_413(tinker, 4 * 1024 * 1024, "ARTFLEET_MAX_BODY_BYTES")
    assert "4 MiB" in tinker.json()["detail"]  # the Tinker clients show `detail`
    train = await front.client.post("/train", content=big, headers={**JSON, **AUTH})
    _assert_413(train, 4 * 1024 * 1024, "ARTFLEET_MAX_BODY_BYTES")
    assert not front.trainer.requests  # nothing reached the trainer
    ok = await front.client.post("/api/v1/create_session", json={"tags": ["a"]})
    assert ok.status_code == 200, ok.text


async def _raw(front: Front, request: bytes) -> bytes:
    """Sends `request` as is and reads the answer until the server closes or it is whole."""
    url = httpx.URL(str(front.client.base_url))
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(request)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        length = int(re.search(rb"content-length: *(\d+)", head, re.I).group(1))  # type: ignore[union-attr]
        return head + await asyncio.wait_for(reader.readexactly(length), 60)
    finally:
        writer.close()


async def test_the_content_length_is_refused_before_the_body_is_sent(front: Front) -> None:
    """Only the headers go out: the 413 comes without the server waiting for 50 MB."""
    answer = await _raw(
        front,
        b"POST /api/v1/create_session HTTP/1.1\r\nHost: api\r\n"
        + f"X-API-Key: tml-{TOKEN}\r\n".encode()
        + b"Content-Type: application/json\r\nContent-Length: 52428800\r\n\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"ARTFLEET_MAX_BODY_BYTES" in answer and b"52428800" in answer


async def _chunks(body: bytes, size: int = 8192) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def test_a_chunked_body_is_counted_as_it_comes(small: Front) -> None:
    """No Content-Length (chunked): the bytes read are counted, the read past the limit
    ends the request with the 413, not the handler's complaint about a cut body."""
    over = await small.client.post(
        "/api/v1/create_session", content=_chunks(_tags(SMALL + 1)), headers=JSON
    )
    assert over.request.headers.get("transfer-encoding") == "chunked"
    _assert_413(over, SMALL, "ARTFLEET_MAX_BODY_BYTES")
    assert not small.trainer.requests
    under = await small.client.post(
        "/api/v1/create_session", content=_chunks(_tags(SMALL)), headers=JSON
    )
    assert under.status_code == 200, under.text
    assert len(small.trainer.last("CreateSession").tags[0]) == SMALL - len(b'{"tags": [""]}')


@pytest.mark.parametrize("route", sorted(DATA_ROUTES))
async def test_data_routes_have_their_own_larger_limit(small: Front, route: str) -> None:
    headers = {**JSON, **AUTH}
    past_ordinary = await small.client.post(route, content=_tags(SMALL * 2), headers=headers)
    assert past_ordinary.status_code not in (413, 415), past_ordinary.text  # reaches its body check
    over = await small.client.post(route, content=_tags(DATA + 1), headers=headers)
    _assert_413(over, DATA, "ARTFLEET_MAX_DATA_BODY_BYTES")
    chunked = await small.client.post(route, content=_chunks(_tags(DATA + 1)), headers=headers)
    _assert_413(chunked, DATA, "ARTFLEET_MAX_DATA_BODY_BYTES")


def _body_routes(front: Front) -> Iterator[tuple[str, str]]:
    """Every (method, concrete path) of the app that takes a body."""

    def flat(routes: list[Any]) -> Iterator[Any]:
        for route in routes:
            included = getattr(route, "original_router", None)
            yield from flat(included.routes) if included is not None else [route]

    for route in flat(create_app(front.settings).routes):
        if isinstance(route, APIRoute):
            path = re.sub(r"\{(\w+)(:path)?\}", "x", route.path)
            for method in sorted((route.methods or set()) & {"POST", "PUT", "PATCH"}):
                yield method, path


async def test_a_body_that_is_not_json_is_415_on_every_route(front: Front) -> None:
    routes = list(_body_routes(front))
    assert ("POST", "/train") in routes and ("POST", "/api/v1/create_session") in routes
    for method, path in routes:
        response = await front.client.request(
            method, path, content=b"{}", headers={**AUTH, "content-type": "text/plain"}
        )
        assert response.status_code == 415, (method, path, response.text)
        body = response.json()
        assert body["field"] == "Content-Type" and "text/plain" in body["error"], body
        assert "application/json" in body["expected"], body
    assert not front.trainer.requests


async def test_json_with_a_charset_and_protobuf_on_forward_backward_pass(front: Front) -> None:
    typed = {"content-type": "application/json; charset=utf-8"}
    session = await front.client.post("/api/v1/create_session", content=b"{}", headers=typed)
    assert session.status_code == 200, session.text
    proto = {"content-type": "application/x-protobuf"}
    garbage = await front.client.post("/api/v1/forward_backward", content=b"\xff", headers=proto)
    assert garbage.status_code == 400, garbage.text  # past the type check, to its parser
    refused = await front.client.post("/api/v1/create_session", content=b"\xff", headers=proto)
    assert refused.status_code == 415
    assert refused.json()["expected"] == ["application/json"]


@pytest.mark.parametrize(
    "path", ["/train", "/rollout", "/api/v1/create_session", "/api/v1/forward_backward"]
)
async def test_a_truncated_json_body_says_so_and_names_no_offset(front: Front, path: str) -> None:
    response = await front.client.post(
        path, content=b'{"project": "p", "model_name": "m"', headers={**JSON, **AUTH}
    )
    assert response.status_code == 400, response.text
    body = response.json()
    message = body["detail"] if path.startswith("/api/v1") else body["error"]
    assert message.startswith("body: not valid JSON ("), message
    if not path.startswith("/api/v1"):
        assert body["field"] == "body" and body["detail"] == []
        assert not re.search(r"\[\d+\]", response.text), response.text


@pytest.mark.parametrize("key", ["", "k" * 256])
async def test_an_empty_or_over_long_idempotency_key_is_422_naming_it(
    front: Front, key: str
) -> None:
    body = {"project": "p", "model_name": "m", "base_model": "smollm2-135m-instruct"}
    response = await front.client.post(
        "/train", json=body, headers={**AUTH, "Idempotency-Key": key}
    )
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "Idempotency-Key"
    assert response.json()["error"].startswith("Idempotency-Key: ")
    assert not front.trainer.requests  # no job made, or asked for
