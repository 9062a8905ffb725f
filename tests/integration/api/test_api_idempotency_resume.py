"""`POST /train` with an `Idempotency-Key`, its `status_url`, and `POST /jobs/{id}/resume`,
through the API app on a real Redis and the submit path's servicers on one gRPC server
(tests/support/submit_fleet.py; no job runs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from submit_fleet import api_client, submit_server, submit_target

from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer

pytestmark = pytest.mark.integration
TOKEN = "idempotency-token"
# The HTTP training API's body, without RULER (no judge key here).
BODY = {"model_name": "agent", "project": "proj", "num_steps": 2, "use_ruler": False}


@pytest.fixture
async def fleet(redis_url: str, tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    store = JobStore(client)
    target = submit_target()
    trainer = TrainerServicer(
        store,
        RolloutClient(target, TOKEN),
        RewardClient(target, TOKEN),
        lambda backend: "",
        art_path=str(tmp_path / "art"),
    )
    server = submit_server(target, TOKEN, trainer, "idempotency-test")
    await server.start()
    try:
        async with api_client(target, TOKEN, tmp_path) as api:
            yield api, store
    finally:
        await server.stop(1)
        await client.aclose()


def _train(api: httpx.AsyncClient, key: str | None = None, **fields: Any) -> Any:
    headers = {"Idempotency-Key": key} if key is not None else {}
    return api.post("/train", json={**BODY, **fields}, headers=headers)


async def test_concurrent_trains_with_one_key_make_one_job_and_status_url_names_it(
    fleet: tuple[httpx.AsyncClient, JobStore],
) -> None:
    api, store = fleet
    replies = await asyncio.gather(*(_train(api, "retry-1") for _ in range(3)))
    assert [r.status_code for r in replies] == [202] * 3, replies[0].text
    (job_id,) = {r.json()["job_id"] for r in replies}
    assert [j.id for j in await store.list()] == [job_id]
    started = replies[0].json()
    assert started["status_url"] == f"/jobs/{job_id}"
    assert started["stream_url"] == f"/jobs/{job_id}/stream"
    newer = await _train(api)  # the same model again, no key: a second job
    assert newer.status_code == 202 and newer.json()["job_id"] != job_id
    status = await api.get(started["status_url"])
    assert status.status_code == 200 and status.json()["id"] == job_id  # not the newest


async def test_a_key_sent_again_with_another_body_is_422_naming_the_header(
    fleet: tuple[httpx.AsyncClient, JobStore],
) -> None:
    api, store = fleet
    first = await _train(api, "key-a")
    assert first.status_code == 202, first.text
    refused = await _train(api, "key-a", num_steps=3)
    assert refused.status_code == 422
    body = refused.json()
    assert body["field"] == "Idempotency-Key"
    assert body["error"].startswith("Idempotency-Key: was used for job " + first.json()["job_id"])
    too_long = await _train(api, "k" * 256)
    assert too_long.status_code == 422 and too_long.json()["field"] == "Idempotency-Key"
    assert len(await store.list()) == 1


async def test_resume_route_queues_a_failed_job_and_refuses_others(
    fleet: tuple[httpx.AsyncClient, JobStore],
) -> None:
    api, store = fleet
    job = await store.create(pb.JobSpec(name="agent", project="proj", steps=3))
    job.completed_steps = 1
    job.steps.add(step=1, reward_mean=0.25)
    await store.save(job)
    await store.set_state(job, pb.JOB_STATE_FAILED, error="RuntimeError: out of memory")
    resumed = await api.post(f"/jobs/{job.id}/resume")
    assert resumed.status_code == 200, resumed.text
    out = resumed.json()
    assert out["state"] == "queued" and out["error"] == "" and out["completed_steps"] == 1
    assert [s["step"] for s in out["steps"]] == [1]
    (resume,) = out["resumes"]
    assert resume["state"] == "failed" and resume["error"] == "RuntimeError: out of memory"
    assert resume["completed_steps"] == 1 and resume["time"]
    status = await api.get("/train/proj/agent/status")
    assert status.json()["resumes"] == out["resumes"]

    again = await api.post(f"/jobs/{job.id}/resume")  # queued now
    assert again.status_code == 409 and "is QUEUED" in again.json()["error"]
    missing = await api.post("/jobs/nope/resume")
    assert missing.status_code == 404 and "no job with id 'nope'" in missing.json()["error"]
