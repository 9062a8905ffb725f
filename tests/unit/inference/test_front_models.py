"""The inference front's GET /v1/models: the served names with vLLM's `max_model_len` (what
the trainer compares a job's max_context_tokens with), and the listing without it while
vLLM does not answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from local_http import serve_app

from artfleet_inference.engine import PolicyEngine
from artfleet_inference.policies import PolicyTable
from artfleet_inference.server import Front
from artfleet_trainer.clients.inference_client import InferenceClient

TOKEN = "fleet-token-for-tests"
VLLM_KEY = "vllm-key-for-tests"


@pytest.fixture
async def vllm() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """vLLM's own /v1/models (loopback, its key), as it lists the base model."""
    state: dict[str, Any] = {"up": True, "calls": 0}

    async def models(request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == f"Bearer {VLLM_KEY}"
        state["calls"] += 1
        if not state["up"]:
            return web.json_response({"error": "starting"}, status=503)
        data = [{"id": "base", "object": "model", "max_model_len": 2048}]
        return web.json_response({"object": "list", "data": data})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner, url = await serve_app(app)
    yield url, state
    await runner.cleanup()


@pytest.fixture
async def front(vllm: tuple[str, dict[str, Any]], tmp_path: Path) -> AsyncIterator[str]:
    table = PolicyTable("base", "lora", lambda name, step: None)
    table.publish("agent", 3, tmp_path / "ckpt")
    engine = PolicyEngine(table, vllm[0], VLLM_KEY, tmp_path, tmp_path / "work")
    runner, url = await serve_app(Front(engine, TOKEN, tmp_path, lambda: True).app)
    yield url
    await runner.cleanup()


async def _models(url: str) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/v1/models", headers=headers) as reply,
    ):
        assert reply.status == 200
        return list((await reply.json())["data"])


async def test_models_carry_vllms_max_model_len(
    front: str, vllm: tuple[str, dict[str, Any]]
) -> None:
    _, state = vllm
    state["up"] = False  # vLLM not answering yet: the names still list
    listed = await _models(front)
    assert [m["id"] for m in listed] == ["base", "agent@3"]
    assert all("max_model_len" not in m for m in listed)
    state["up"] = True
    assert [m["max_model_len"] for m in await _models(front)] == [2048, 2048]
    calls = state["calls"]
    await _models(front)
    assert state["calls"] == calls  # fixed while vLLM runs: asked once
    assert await InferenceClient(front, TOKEN).max_model_len() == 2048
