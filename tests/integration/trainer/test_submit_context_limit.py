"""Trainer.SubmitJob against the inference service's context, on real servers: Redis, the
trainer's and reward's servicers on a gRPC server, the inference service's real HTTP front
(its vLLM a listing that says `max_model_len`, as vLLM's /v1/models does). A job whose
max_context_tokens exceeds it is INVALID_ARGUMENT naming the field and both numbers; with
the inference service away the job is accepted (it may be starting)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from aiohttp import web
from local_http import serve_app
from submit_fleet import submit_server, submit_target

from artfleet.runtime.rpc.client import aio_channel
from artfleet.specs.job import spec_to_proto, validate_spec
from artfleet.v1 import (
    trainer_pb2,
    trainer_pb2_grpc,
)
from artfleet_inference.engine import PolicyEngine
from artfleet_inference.policies import PolicyTable
from artfleet_inference.server import Front
from artfleet_trainer.clients.inference_client import InferenceClient
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.context_limit import ContextLimits
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer

pytestmark = pytest.mark.integration
TOKEN = "context-limit-token"
VLLM_KEY = "vllm-key-for-tests"
MAX_MODEL_LEN = 2048


@pytest.fixture
async def inference(tmp_path: Path) -> AsyncIterator[tuple[str, web.AppRunner]]:
    async def models(_: web.Request) -> web.Response:
        data = [{"id": "base", "object": "model", "max_model_len": MAX_MODEL_LEN}]
        return web.json_response({"object": "list", "data": data})

    vllm = web.Application()
    vllm.router.add_get("/v1/models", models)
    vllm_runner, vllm_url = await serve_app(vllm)
    engine = PolicyEngine(
        PolicyTable("base", "lora", lambda name, step: None),
        vllm_url,
        VLLM_KEY,
        tmp_path,
        tmp_path / "work",
    )
    front_runner, url = await serve_app(Front(engine, TOKEN, tmp_path, lambda: True).app)
    yield url, front_runner
    await front_runner.cleanup()
    await vllm_runner.cleanup()


@pytest.fixture
async def trainer(redis_url: str, inference: tuple[str, Any]) -> AsyncIterator[tuple[Any, ...]]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    store = JobStore(client)
    target = submit_target()
    servicer = TrainerServicer(
        store,
        RolloutClient(target, TOKEN),
        RewardClient(target, TOKEN),
        lambda backend: "",
        context_limits=ContextLimits(inference=InferenceClient(inference[0], TOKEN)),
    )
    server = submit_server(target, TOKEN, servicer, "context-limit-test")
    await server.start()
    try:
        yield target, store, inference[1]
    finally:
        await server.stop(1)
        await client.aclose()


async def _submit(target: str, max_context_tokens: int) -> Any:
    spec = spec_to_proto(validate_spec({"max_context_tokens": max_context_tokens}))
    async with aio_channel(target, TOKEN) as channel:
        stub = trainer_pb2_grpc.TrainerStub(channel)
        return await stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec))


async def test_a_context_over_the_inference_services_is_refused_at_submit(
    trainer: tuple[Any, ...],
) -> None:
    target, store, front = trainer
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await _submit(target, 4096)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = info.value.details() or ""
    assert details.startswith("max_context_tokens: 4096 exceeds")
    assert f"max_model_len (vLLM) ({MAX_MODEL_LEN})" in details
    assert await store.list() == []

    job = await _submit(target, MAX_MODEL_LEN)  # what it serves fits
    assert job.spec.max_context_tokens == MAX_MODEL_LEN

    await front.cleanup()  # the inference service away (restarting): no reason to refuse
    accepted = await _submit(target, 4096)
    assert accepted.spec.max_context_tokens == 4096
    assert len(await store.list()) == 2
