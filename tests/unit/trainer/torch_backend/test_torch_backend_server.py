"""The inference server's HTTP edges (auth, errors) and the model cache, without a model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import pytest_asyncio

from artfleet.contracts import base_models, embedded_model
from artfleet_trainer.torch_backend import model_loader
from artfleet_trainer.torch_serving.server import InferenceServer

KEY = "unit-test-key"


@pytest_asyncio.fixture
async def base_url() -> AsyncIterator[str]:
    server = InferenceServer({}, api_key=KEY)
    port = await server.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await server.stop()


async def _call(
    method: str, url: str, *, key: str | None = KEY, data: bytes | None = None
) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, headers=headers, data=data) as response,
    ):
        return response.status, await response.json()


def _assert_error(body: dict) -> dict:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "code", "param"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize("key", [None, "wrong", ""])
async def test_every_route_needs_the_key(base_url: str, key: str | None) -> None:
    routes = [("GET", "/models"), ("POST", "/chat/completions"), ("POST", "/completions")]
    for method, path in [*routes, ("GET", "/nowhere")]:
        status, body = await _call(method, base_url + path, key=key, data=b"{}")
        assert status == 401
        assert _assert_error(body)["code"] == "invalid_api_key"


async def test_models_lists_nothing_without_models(base_url: str) -> None:
    status, body = await _call("GET", base_url + "/models")
    assert (status, body) == (200, {"object": "list", "data": []})


async def test_malformed_json_is_400(base_url: str) -> None:
    status, body = await _call("POST", base_url + "/chat/completions", data=b"{not json")
    assert status == 400
    assert _assert_error(body)["type"] == "invalid_request_error"


async def test_invalid_field_is_400_naming_it(base_url: str) -> None:
    data = b'{"model": "agent", "messages": [{"role": "user", "content": "x"}], "n": 0}'
    status, body = await _call("POST", base_url + "/chat/completions", data=data)
    assert status == 400
    assert _assert_error(body)["param"] == "n"


async def test_unknown_model_is_404(base_url: str) -> None:
    data = b'{"model": "ghost@3", "messages": [{"role": "user", "content": "x"}]}'
    status, body = await _call("POST", base_url + "/chat/completions", data=data)
    assert status == 404
    assert _assert_error(body)["code"] == "model_not_found"


async def test_unknown_route_and_method_are_json_errors(base_url: str) -> None:
    status, body = await _call("GET", base_url + "/nowhere")
    assert status == 404
    _assert_error(body)
    status, body = await _call("GET", base_url + "/chat/completions")
    assert status == 405
    _assert_error(body)


def test_embedded_model_names_and_file() -> None:
    assert base_models.is_embedded_default("smollm2-135m-instruct")
    assert base_models.is_embedded_default("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert not base_models.is_embedded_default("gpt2")
    assert embedded_model.embedded_gguf_path().name == embedded_model.GGUF_FILE


def test_unknown_base_model_is_refused_without_download(tmp_path: Path) -> None:
    with pytest.raises(embedded_model.ModelLoadError, match="unknown base model"):
        model_loader.load_base_model("some-org/some-model", cache_dir=tmp_path)


def test_publish_keeps_a_complete_copy_and_replaces_a_partial_one(tmp_path: Path) -> None:
    def staged(name: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        (path / "model.safetensors").write_text(name)
        (path / embedded_model.COMPLETE_MARKER).write_text("ok")
        return path

    target = tmp_path / "model"
    embedded_model._publish(staged("first"), target)
    assert (target / "model.safetensors").read_text() == "first"
    # A second process finishing later leaves the complete copy alone.
    embedded_model._publish(staged("second"), target)
    assert (target / "model.safetensors").read_text() == "first"
    # An incomplete copy (a crash before the marker) is replaced.
    (target / embedded_model.COMPLETE_MARKER).unlink()
    embedded_model._publish(staged("third"), target)
    assert (target / "model.safetensors").read_text() == "third"
