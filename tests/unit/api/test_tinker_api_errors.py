"""The Tinker-compatible API refuses with a body: the key as its clients
send it, the trainer's gRPC status as the HTTP status clients act on (retry, give up,
stop heartbeating), and each route this server does not implement named."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from fastapi.routing import APIRoute
from tinker_api_fake import TOKEN, Front, tinker_api_front

from artfleet_api.tinker_api import refused, rest
from artfleet_api.tinker_api import routes as tinker_api

API = "/api/v1"
C = grpc.StatusCode  # the table below reads as the mapping does


@pytest.fixture
async def front() -> AsyncIterator[Front]:
    async with tinker_api_front() as front:
        yield front


def _routes() -> Iterator[tuple[str, str]]:
    """Every (method, path) the Tinker-compatible API answers."""
    for route in tinker_api.router.routes:
        if isinstance(route, APIRoute):
            yield from ((m, route.path) for m in sorted(route.methods or ()))
    for router in (rest.router, refused.router):
        for route in router.routes:
            assert isinstance(route, APIRoute)
            yield from ((m, API + route.path) for m in sorted(route.methods or ()))


def _concrete(path: str) -> str:
    return path.replace("{checkpoint_id:path}", "weights/n").replace(
        "{checkpoint_path:path}", "weights/n/archive"
    )


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-API-Key": "tml-wrong"},
        {"X-API-Key": f"tml-{TOKEN}x"},
        {"X-API-Key": f"Bearer {TOKEN}"},
        {"Authorization": f"tml-{TOKEN}"},
    ],
)
async def test_every_route_needs_the_key(front: Front, headers: dict[str, str]) -> None:
    routes = list(_routes())
    assert len(routes) > 40 and ("POST", f"{API}/forward_backward") in routes
    front.client.headers.pop("X-API-Key")
    for method, path in routes:
        response = await front.client.request(method, _concrete(path), headers=headers)
        assert response.status_code == 401, (method, path, response.text)
        assert response.json()["field"] == "X-API-Key" and response.json()["detail"]
    assert not front.trainer.requests


@pytest.mark.parametrize(
    "headers",
    [
        {"X-API-Key": f"tml-{TOKEN}"},  # as SDKs send it (they want the prefix)
        {"X-API-Key": TOKEN},
        {"Authorization": f"Bearer {TOKEN}"},  # as the rest of the API takes it
    ],
)
async def test_the_fleet_token_in_each_form(front: Front, headers: dict[str, str]) -> None:
    front.client.headers.pop("X-API-Key")
    response = await front.client.post(f"{API}/get_info", json={"model_id": "m"}, headers=headers)
    assert response.status_code == 200, response.text


async def test_the_api_key_opens_only_the_tinker_api(front: Front) -> None:
    response = await front.client.get("/jobs")  # the client sends X-API-Key only
    assert response.status_code == 401 and response.json()["field"] == "Authorization"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (C.INVALID_ARGUMENT, 400),
        (C.UNAUTHENTICATED, 401),
        (C.PERMISSION_DENIED, 403),
        (C.NOT_FOUND, 404),
        (C.ALREADY_EXISTS, 400),  # not 409: clients retry that for minutes
        (C.FAILED_PRECONDITION, 400),
        (C.RESOURCE_EXHAUSTED, 429),
        (C.UNIMPLEMENTED, 501),
        (C.UNAVAILABLE, 503),
        (C.DEADLINE_EXCEEDED, 504),
        (C.INTERNAL, 500),
        (C.DATA_LOSS, 500),
    ],
)
async def test_grpc_statuses_map_onto_http(
    front: Front, code: grpc.StatusCode, status: int
) -> None:
    front.trainer.failures["GetInfo"] = (code, f"model m: {code.name.lower()}")
    response = await front.client.post(f"{API}/get_info", json={"model_id": "m"})
    assert response.status_code == status
    assert response.json() == {"detail": f"model m: {code.name.lower()}"}


async def test_a_finished_sessions_heartbeat_is_410(front: Front) -> None:
    front.trainer.failures["Heartbeat"] = (C.FAILED_PRECONDITION, "session S is finished")
    beat = await front.client.post(f"{API}/session_heartbeat", json={"session_id": "S"})
    assert beat.status_code == 410 and beat.json() == {"detail": "session S is finished"}
    front.trainer.failures["Heartbeat"] = (C.NOT_FOUND, "no session S")
    beat = await front.client.post(f"{API}/session_heartbeat", json={"session_id": "S"})
    assert beat.status_code == 404


async def test_a_bad_body_is_a_400_with_a_body(front: Front) -> None:
    for body in ({}, {"model_id": 3}, None):
        response = await front.client.post(f"{API}/get_info", json=body)
        assert response.status_code == 400
        assert response.json()["detail"].startswith(("model_id:", "body:")), response.text
    # A field named like a part of the request ("path") is still named.
    load = await front.client.post(f"{API}/load_weights", json={"optimizer": True})
    assert load.status_code == 400 and load.json()["detail"].startswith("path:")
    response = await front.client.post(
        f"{API}/get_info", content=b"{", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["detail"]


async def test_an_unknown_route_is_named(front: Front) -> None:
    response = await front.client.post(f"{API}/teleport")
    assert response.status_code == 404
    assert response.json() == {"detail": "POST /api/v1/teleport is not a route of this server"}
    wrong_method = await front.client.get(f"{API}/forward_backward")
    assert wrong_method.status_code == 405 and wrong_method.json()["detail"]


@pytest.mark.parametrize(("method", "path"), refused.FLAG_GATED + refused.USER_CALLED)
async def test_unimplemented_routes_are_refused_by_name(
    front: Front, method: str, path: str
) -> None:
    concrete = path.replace("{session_id}", "S")
    response = await front.client.request(method, API + concrete, json={})
    status = 501 if (method, path) in refused.FLAG_GATED else 404
    assert response.status_code == status, response.text
    assert response.json() == {"detail": f"{method} {API}{path} is not implemented by this server"}
    assert not front.trainer.requests


CHECKPOINT = f"{API}/training_runs/S:train:0/checkpoints/weights/n"
NAMED = f"{API}/training_runs/{{id}}/checkpoints/{{checkpoint_id}}"


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("GET", "archive", None),
        ("GET", "external_weights_urls", None),
        ("POST", "publish", None),
        ("DELETE", "publish", None),
        ("PUT", "ttl", {"ttl_seconds": 3600}),
    ],
)
async def test_checkpoint_routes_are_refused_by_name(
    front: Front, method: str, suffix: str, body: Any
) -> None:
    response = await front.client.request(method, f"{CHECKPOINT}/{suffix}", json=body)
    assert response.status_code == 404, response.text
    assert (
        response.json()["detail"] == f"{method} {NAMED}/{suffix} is not implemented by this server"
    )
    assert not front.trainer.requests
