"""A job's max_context_tokens against what serves its policy (artfleet_trainer.jobs.
context_limit): the pure comparison, where each engine's context comes from, and the
inference service that does not answer (the job is accepted)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from local_http import serve_app
from pydantic import SecretStr

from artfleet.contracts.errors import InvalidArgument
from artfleet.contracts.model_listing import listed_max_model_len
from artfleet.specs.job import validate_spec
from artfleet_trainer.clients.inference_client import InferenceClient, InferenceRefused
from artfleet_trainer.jobs.context_limit import (
    ART_DEFAULT_MAX_SEQ_LENGTH,
    TORCH_DEFAULT_CONTEXT,
    ContextLimits,
    EngineContext,
    art_context,
    check_context,
    model_context,
)

TOKEN = "a-fleet-token-for-tests"


def test_a_budget_over_the_engines_context_is_refused_naming_the_field_and_both_numbers() -> None:
    engine = EngineContext(2048, "the inference service's max_model_len (vLLM)")
    check_context(2048, engine)  # equal fits
    check_context(100_000, None)  # not known: not refused
    with pytest.raises(InvalidArgument) as info:
        check_context(4096, engine)
    assert info.value.field == "max_context_tokens"
    assert "4096" in info.value.message and "(2048)" in info.value.message
    assert "max_model_len" in info.value.message


def test_the_art_backend_takes_the_jobs_max_seq_length_else_arts_default() -> None:
    spec = validate_spec({"backend": "art", "max_seq_length": 8192})
    assert art_context(spec).tokens == 8192
    assert "max_seq_length" in art_context(spec).source
    assert art_context(validate_spec({"backend": "art"})).tokens == ART_DEFAULT_MAX_SEQ_LENGTH


def _model(folder: Path, config: dict[str, Any]) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_the_torch_server_takes_the_model_configs_max_position_embeddings(tmp_path: Path) -> None:
    qwen = _model(tmp_path / "qwen", {"max_position_embeddings": 40960})
    assert model_context(str(qwen), None) == EngineContext(
        40960, f"{qwen}'s max_position_embeddings (the torch server)"
    )
    plain = _model(tmp_path / "plain", {})
    context = model_context(str(plain), None)
    assert context is not None and context.tokens == TORCH_DEFAULT_CONTEXT
    cache = _model(tmp_path / "cache", {"max_position_embeddings": 8192})
    embedded = model_context("smollm2-135m-instruct", cache)
    assert embedded is not None and embedded.tokens == 8192
    # The embedded default before its first load: no copy to read, so not known.
    assert model_context("smollm2-135m-instruct", tmp_path / "none") is None


async def test_limits_without_an_inference_service_read_the_base_model(tmp_path: Path) -> None:
    folder = _model(tmp_path / "m", {"max_position_embeddings": 4096})
    limits = ContextLimits()
    await limits.check(validate_spec({"base_model": str(folder), "max_context_tokens": 4096}))
    with pytest.raises(InvalidArgument, match=r"max_context_tokens: 8192 exceeds .*\(4096\)"):
        await limits.check(validate_spec({"base_model": str(folder), "max_context_tokens": 8192}))


def test_the_listing_gives_vllms_max_model_len() -> None:
    listed = {"data": [{"id": "m", "max_model_len": 4096}, {"id": "m@1", "max_model_len": 4096}]}
    assert listed_max_model_len(listed) == 4096
    assert listed_max_model_len({"data": [{"id": "m"}]}) is None
    assert listed_max_model_len({"data": [{"id": "m", "max_model_len": True}]}) is None
    assert listed_max_model_len([1, 2]) is None


@pytest.fixture
async def inference() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """The inference service's /v1/models, answering what the test sets."""
    answer: dict[str, Any] = {"status": 200, "body": {"object": "list", "data": []}}

    async def models(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"error": {"message": "bad token"}}, status=401)
        return web.json_response(answer["body"], status=answer["status"])

    app = web.Application()
    app.router.add_get("/v1/models", models)
    runner, url = await serve_app(app)
    yield url, answer
    await runner.cleanup()


async def test_the_inference_services_max_model_len_is_the_limit(inference: Any) -> None:
    url, answer = inference
    answer["body"] = {"object": "list", "data": [{"id": "base", "max_model_len": 2048}]}
    client = InferenceClient(url, TOKEN)
    assert await client.max_model_len() == 2048
    limits = ContextLimits(inference=client)
    await limits.check(validate_spec({"max_context_tokens": 2048}))
    with pytest.raises(InvalidArgument) as info:
        await limits.check(validate_spec({"max_context_tokens": 4096}))
    assert info.value.field == "max_context_tokens"
    assert "4096" in info.value.message and "max_model_len (vLLM) (2048)" in info.value.message
    # The art backend runs its own vLLM: the job's max_seq_length, not the service's.
    await limits.check(
        validate_spec({"backend": "art", "max_seq_length": 8192, "max_context_tokens": 4096})
    )
    with pytest.raises(InferenceRefused):
        await InferenceClient(url, "wrong-token").max_model_len()


async def test_an_inference_service_that_does_not_answer_is_no_reason_to_refuse(
    inference: Any, caplog: pytest.LogCaptureFixture
) -> None:
    url, answer = inference
    spec = validate_spec({"max_context_tokens": 100_000})
    gone = ContextLimits(inference=InferenceClient("http://127.0.0.1:9", TOKEN))  # discard port
    with caplog.at_level(logging.WARNING):
        await gone.check(spec)
    assert "max_context_tokens not checked" in caplog.text
    answer["status"] = 503
    await ContextLimits(inference=InferenceClient(url, TOKEN)).check(spec)
    answer["status"], answer["body"] = 200, {"data": [{"id": "base"}]}  # no max_model_len
    await ContextLimits(inference=InferenceClient(url, TOKEN)).check(spec)


def test_the_embedded_cache_is_where_the_loader_writes_it() -> None:
    from artfleet.contracts.base_models import DEFAULT_CACHE_DIR
    from artfleet_trainer.settings import TrainerSettings

    token = SecretStr(TOKEN)
    limits = ContextLimits.for_settings(TrainerSettings(api_token=token, inference_engine="torch"))
    assert limits._embedded_cache == DEFAULT_CACHE_DIR.expanduser()
    assert limits._inference is None  # the trainer's own server: the model's own context
    vllm = ContextLimits.for_settings(TrainerSettings(api_token=token))
    assert vllm._inference is not None  # the default engine: the inference service
