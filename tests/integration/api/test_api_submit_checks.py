"""What the API and the trainer refuse or report before anything runs, on a real Redis and
a real gRPC server holding the trainer's and the reward service's servicers (no rollout
service: every check here happens before one is asked): the base model at submit, the
judge's key at /evaluate, /health's backend and key fields, models after a delete, and a
job's own experiment name."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from artfleet.contracts import checkpoint_layout
from artfleet.runtime.config import ServerSettings
from artfleet.runtime.rpc.client import aio_channel
from artfleet.runtime.rpc.server import GrpcServer
from artfleet.runtime.service import free_port
from artfleet.specs.job import spec_to_proto, validate_spec
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2_grpc, trainer_pb2, trainer_pb2_grpc
from artfleet_api.app import create_app
from artfleet_api.settings import ApiSettings
from artfleet_reward.servicer import RewardServicer
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer

pytestmark = pytest.mark.integration
TOKEN = "submit-checks-token"
HUB_ID = "Qwen/Qwen2.5-7B-Instruct"  # the HTTP training API's example
# The HTTP training API's README, verbatim.
EVALUATE = {
    "trajectories": [
        {
            "messages": [
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": "2+2 equals 4"},
            ]
        }
    ],
    "judge_model": "gpt-4o",
    "evaluation_prompt": "Rate the accuracy of this mathematical response.",
}


class Services:
    def __init__(self, store: JobStore, art_path: Path, folder: Path, port: int) -> None:
        self.store, self.art_path, self.folder, self.port = store, art_path, folder, port


@pytest.fixture
async def services(redis_url: str, tmp_path: Path) -> AsyncIterator[Services]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    store = JobStore(client)
    folder = tmp_path / "qwen-local"  # a model folder as the trainer sees one: its config
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    art_path = tmp_path / "art"
    port = free_port()
    target = f"127.0.0.1:{port}"
    trainer = TrainerServicer(
        store,
        RolloutClient("127.0.0.1:1", TOKEN),  # nothing there: asked after the base model
        RewardClient(target, TOKEN),
        lambda backend: "",
        art_path=str(art_path),
        backend="torch",
        base_model_map={"my-qwen": str(folder)},
    )
    reward = RewardServicer()
    server = GrpcServer(
        ServerSettings(api_token=SecretStr(TOKEN), port=port, metrics_port=0),
        "submit-checks",
        [
            lambda s: trainer_pb2_grpc.add_TrainerServicer_to_server(trainer, s),
            lambda s: reward_pb2_grpc.add_RewardServicer_to_server(reward, s),
        ],
        ["artfleet.v1.Trainer", "artfleet.v1.Reward"],
    )
    await server.start()
    try:
        yield Services(store, art_path, folder, port)
    finally:
        await server.stop(1)
        await client.aclose()


@pytest.fixture
async def api(services: Services, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(services, tmp_path) as client:
        yield client


@contextlib.asynccontextmanager
async def _client(
    services: Services, tmp_path: Path, **settings_: Any
) -> AsyncIterator[httpx.AsyncClient]:
    target = f"127.0.0.1:{services.port}"
    settings = ApiSettings(
        api_token=TOKEN,  # type: ignore[arg-type]
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        trainer_target=target,
        reward_target=target,
        rollout_target="127.0.0.1:1",
        sandbox_target="127.0.0.1:1",
        trajectories_dir=str(tmp_path / "logs"),
        health_timeout_s=2.0,
        rpc_timeout_s=10.0,
        **settings_,
    )
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=transport,
            base_url="http://api",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as client,
    ):
        yield client


async def _submit(port: int, base_model: str) -> grpc.aio.AioRpcError:
    spec = spec_to_proto(validate_spec({"base_model": base_model}))
    async with aio_channel(f"127.0.0.1:{port}", TOKEN) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await trainer_pb2_grpc.TrainerStub(channel).SubmitJob(
                trainer_pb2.SubmitJobRequest(spec=spec)
            )
    return info.value


async def test_an_unknown_base_model_is_refused_at_submit_with_the_known_ones(
    services: Services,
) -> None:
    refused = await _submit(services.port, HUB_ID)
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = refused.details() or ""
    assert details.startswith(f"base_model: unknown base model '{HUB_ID}'"), details
    # The known models (the embedded default, the map's names), and how to map a hub id.
    for known in ("smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct", "my-qwen"):
        assert known in details
    assert 'ARTFLEET_BASE_MODEL_MAP=\'{"Qwen/Qwen2.5-7B-Instruct": ' in details
    empty = services.folder.parent / "no-config"
    empty.mkdir()
    without_config = await _submit(services.port, str(empty))
    assert "without config.json" in (without_config.details() or "")
    assert await services.store.list() == []  # nothing was queued
    # A mapped name and a folder pass this check: the next one (the environment) fails here.
    for loadable in ("my-qwen", str(services.folder), "smollm2-135m-instruct"):
        assert (await _submit(services.port, loadable)).code() == grpc.StatusCode.UNAVAILABLE


async def test_http_train_with_an_unknown_base_model_is_422_naming_it(
    api: httpx.AsyncClient,
) -> None:
    # Without RULER the API asks nothing before the trainer (with it, the rollout service
    # for the environment's agent kind, absent here).
    body: dict[str, object] = {"model_name": "my-agent-v1", "project": "my-project"}
    body |= {"base_model": HUB_ID, "use_ruler": False}
    response = await api.post("/train", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "base_model"
    assert "ARTFLEET_BASE_MODEL_MAP" in response.json()["error"]
    spec_form = await api.post("/train", json={"spec": {"base_model": HUB_ID}})
    assert spec_form.status_code == 422, spec_form.text
    assert spec_form.json()["field"] == "spec.base_model"
    assert "smollm2-135m-instruct" in spec_form.json()["error"]


async def test_evaluate_without_the_judges_key_is_422_naming_the_setting(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the reward service runs here
    response = await api.post("/evaluate", json=EVALUATE)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["field"] == "judge_model"
    assert "OPENAI_API_KEY is not set in the reward service's environment" in body["error"]
    assert 'ARTFLEET_JUDGE_MODEL_MAP=\'{"gpt-4o": "policy"}\'' in body["error"]


@pytest.mark.parametrize("keys", [False, True])
async def test_health_reports_backend_judge_key_and_wandb(
    api: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, keys: bool
) -> None:
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for name in ("OPENAI_API_KEY", "WANDB_API_KEY"):
        if keys:
            monkeypatch.setenv(name, "not-a-real-key")
        else:
            monkeypatch.delenv(name, raising=False)
    body = (await api.get("/health", headers={"Authorization": ""})).json()
    assert body["art_backend"] == "torch"
    assert body["openai_configured"] is keys
    assert body["wandb_configured"] is keys


async def _finished_job(services: Services, name: str, experiment: str = "default") -> pb.Job:
    spec = spec_to_proto(validate_spec({"name": name, "project": "p", "experiment": experiment}))
    job = await services.store.create(spec, config_hash="h")
    await services.store.set_state(job, pb.JOB_STATE_SUCCEEDED)
    directory = checkpoint_layout.model_dir(str(services.art_path), "p", f"{name}-{job.id}")
    checkpoint = directory / "checkpoints" / "0001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "adapter_config.json").write_text(json.dumps({"r": 8}))
    return job


async def test_a_deleted_model_leaves_the_list_and_a_second_delete_is_404(
    api: httpx.AsyncClient, services: Services
) -> None:
    await _finished_job(services, "gone")
    await _finished_job(services, "kept")
    listed = (await api.get("/models")).json()["models"]
    assert {m["model_name"] for m in listed} == {"gone", "kept"}
    assert (await api.delete("/models/p/gone")).status_code == 204
    listed = (await api.get("/models")).json()["models"]
    assert [m["model_name"] for m in listed] == ["kept"]
    again = await api.delete("/models/p/gone")
    assert again.status_code == 404 and again.json()["field"] == "model_name"


async def test_status_shows_the_jobs_own_experiment(
    api: httpx.AsyncClient, services: Services
) -> None:
    job = await _finished_job(services, "agent", experiment="lr-sweep-3")
    assert (await api.get(f"/jobs/{job.id}")).json()["experiment"] == "lr-sweep-3"
    status = (await api.get("/train/p/agent/status")).json()
    assert status["experiment"] == "lr-sweep-3"


def _checkpoint(services: Services, job: pb.Job, step: int) -> None:
    directory = checkpoint_layout.model_dir(
        str(services.art_path), "p", f"{job.spec.name}-{job.id}"
    )
    checkpoint = directory / "checkpoints" / f"{step:04d}"
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / "adapter_config.json").write_text(json.dumps({"r": 8}))


async def test_a_job_lists_only_the_checkpoints_on_the_trainers_disk(
    api: httpx.AsyncClient, services: Services
) -> None:
    job = await _finished_job(services, "kept-some")
    job.steps.extend([pb.StepSummary(step=s) for s in (1, 2, 3)])
    await services.store.save(job)
    for step in (0, 3):  # retention deleted step 2's
        _checkpoint(services, job, step)
    body = (await api.get(f"/jobs/{job.id}")).json()
    assert [(c["step"], c["training_step"]) for c in body["checkpoints"]] == [
        (0, None),
        (1, 1),
        (3, 3),
    ]
    assert body["checkpoints"][2]["policy"] == f"kept-some-{job.id}@3"
    none = await services.store.create(spec_to_proto(validate_spec({"name": "fresh"})))
    assert (await api.get(f"/jobs/{none.id}")).json()["checkpoints"] == []
    listed = (await api.get("/jobs")).json()["jobs"]
    assert all(j["checkpoints"] is None for j in listed)  # a listing asks no Models RPC


async def _with_policy(services: Services, name: str, state: Any, on_disk: bool) -> pb.Job:
    job = await _finished_job(services, name)
    job.policy = f"{name}-{job.id}@1"
    await services.store.save(job)
    await services.store.set_state(job, state)
    if not on_disk:
        shutil.rmtree(checkpoint_layout.model_dir(str(services.art_path), "p", f"{name}-{job.id}"))
    return job


async def test_the_policy_judge_is_named_at_creation_skipping_failed_and_deleted_ones(
    services: Services, tmp_path: Path
) -> None:
    good = await _with_policy(services, "good", pb.JOB_STATE_SUCCEEDED, on_disk=True)
    await _with_policy(services, "failed", pb.JOB_STATE_FAILED, on_disk=True)  # ran last
    await _with_policy(services, "deleted", pb.JOB_STATE_SUCCEEDED, on_disk=False)
    settings = {
        "judge_model_map": {"gpt-4o": "policy"},
        "policy_base_url": "http://127.0.0.1:1/v1",  # nothing answers: the score is 0
    }
    async with _client(services, tmp_path, **settings) as api:
        response = await api.post("/evaluate", json=EVALUATE)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["policy"] == good.policy and body["judge"] == f"policy ({good.policy})"
        assert body["outcome"]["failures"][0]["scorer"] == "judge"  # it was called, and failed
        named = await api.post(
            "/evaluate", json={**EVALUATE, "project": "p", "model_name": "failed"}
        )
        assert named.status_code == 409, named.text
        assert named.json()["field"] == "judge_model"
        assert "p/failed has none" in named.json()["error"]
