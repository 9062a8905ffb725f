"""The trainer's client of the inference service: what it sends, and which failures stop a
job (a refusal) and which do not (the service away)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from local_http import serve_app

from artfleet_trainer.clients.inference_client import (
    InferenceClient,
    InferenceRefused,
    InferenceUnavailable,
)

TOKEN = "a-fleet-token-for-tests"


@pytest.fixture
async def service() -> AsyncIterator[tuple[str, list[dict[str, Any]], dict[str, int]]]:
    """The service's control routes, answering with the status the test sets."""
    seen: list[dict[str, Any]] = []
    answer = {"status": 200}

    async def publish(request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        seen.append(await request.json())
        if answer["status"] != 200:
            body = {"error": {"message": "no", "param": "base_model"}}
            return web.json_response(body, status=answer["status"])
        return web.json_response({"model": "m@1", "seconds": 0.5})

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/artfleet/v1/policies", publish)
    app.router.add_get("/health", health)
    runner, url = await serve_app(app)
    yield url, seen, answer
    await runner.cleanup()


async def test_publish_sends_the_checkpoint_and_its_base(service: Any, tmp_path: Path) -> None:
    url, seen, _ = service
    client = InferenceClient(url, TOKEN)
    assert client.public_url == f"{url}/v1"
    assert await client.publish("m", 1, tmp_path, "smollm2-135m-instruct") == 0.5
    assert seen == [
        {"name": "m", "step": 1, "checkpoint": str(tmp_path), "base_model": "smollm2-135m-instruct"}
    ]
    assert await client.healthy()


async def test_refusals_and_outages_are_told_apart(service: Any, tmp_path: Path) -> None:
    url, _, answer = service
    client = InferenceClient(url, TOKEN)
    answer["status"] = 400
    with pytest.raises(InferenceRefused, match="400"):
        await client.publish("m", 1, tmp_path, "other")
    answer["status"] = 502
    with pytest.raises(InferenceUnavailable, match="502"):
        await client.publish("m", 1, tmp_path, "smollm2-135m-instruct")
    gone = InferenceClient("http://127.0.0.1:9", TOKEN)  # nothing listens on the discard port
    with pytest.raises(InferenceUnavailable):
        await gone.publish("m", 1, tmp_path, "smollm2-135m-instruct")
    assert not await gone.healthy()
    await gone.retire("m", 1)  # best effort: logs, never raises
