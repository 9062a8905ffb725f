"""`artfleet jobs resume` and `jobs status` against the real trainer servicer (gRPC, Redis):
a FAILED job is queued again with its reason kept, shown by status, once the reward
service has checked its scorers (as at submit); an unknown id, a
finished job and an empty id are refused with the gRPC status and, in the CLI, exit 2.
SubmitJob refuses a bad idempotency key before anything else is asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest
import redis.asyncio as aioredis
from submit_fleet import submit_server
from typer.testing import CliRunner, Result

from artfleet.runtime.rpc.client import aio_channel
from artfleet.runtime.service import free_port
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.main import app
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer

pytestmark = pytest.mark.integration
TOKEN = "jobs-resume-token"


async def cli(target: str, *args: str) -> Result:
    env = {"ARTFLEET_API_TOKEN": TOKEN, "COLUMNS": "200"}
    runner = CliRunner()
    return await asyncio.to_thread(
        lambda: runner.invoke(app, ["jobs", *args, "--target", target], env=env)
    )


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[JobStore]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    yield JobStore(client)
    await client.aclose()


@asynccontextmanager
async def serving(store: JobStore, reward: str = "") -> AsyncIterator[str]:
    """The trainer's servicer (with the reward service's beside it, unless `reward` names
    another address) on a free port; its target."""
    target = f"127.0.0.1:{free_port()}"
    servicer = TrainerServicer(
        store,
        RolloutClient("127.0.0.1:1", TOKEN),  # not used by the job RPCs here
        RewardClient(reward or target, TOKEN),
        lambda backend: "",
    )
    server = submit_server(target, TOKEN, servicer, "trainer-resume-test")
    await server.start()
    try:
        yield target
    finally:
        await server.stop(1)


@pytest.fixture
async def trainer(store: JobStore) -> AsyncIterator[tuple[str, JobStore]]:
    async with serving(store) as target:
        yield target, store


async def _job(store: JobStore, state: int, error: str = "") -> pb.Job:
    job = await store.create(pb.JobSpec(name="agent", steps=3))
    job.completed_steps = 1
    job.steps.add(step=1, reward_mean=0.5)
    await store.save(job)
    await store.set_state(job, state, error=error)
    return job


async def test_resume_queues_a_failed_job_and_status_shows_its_reason(
    trainer: tuple[str, JobStore],
) -> None:
    target, store = trainer
    job = await _job(store, pb.JOB_STATE_FAILED, error="QuorumNotReached: 1/3 groups answered")
    resumed = await cli(target, "resume", job.id)
    assert resumed.exit_code == 0, resumed.output
    assert f"job {job.id}: QUEUED, resumes after step 1" in resumed.stdout
    assert (await store.get(job.id)).state == pb.JOB_STATE_QUEUED
    status = await cli(target, "status", job.id)
    assert status.exit_code == 0, status.output
    assert "QUEUED (queue position 1)" in status.stdout
    assert "after step 1, was FAILED: QuorumNotReached: 1/3 groups answered" in status.stdout
    assert "error:" not in status.stdout  # the resumed run has none yet


async def test_resume_checks_the_scorers_first_and_keeps_the_job_failed_when_it_cannot(
    store: JobStore,
) -> None:
    job = await _job(store, pb.JOB_STATE_FAILED, error="ScoringFailed: the judge is down")
    async with serving(store, reward="127.0.0.1:1") as target:
        refused = await cli(target, "resume", job.id)
    assert refused.exit_code == 1, refused.output  # the reward service is unreachable
    assert "reward service 127.0.0.1:1" in refused.stderr
    assert (await store.get(job.id)).state == pb.JOB_STATE_FAILED


async def test_resume_of_an_unknown_or_finished_job_exits_2_naming_why(
    trainer: tuple[str, JobStore],
) -> None:
    target, store = trainer
    unknown = await cli(target, "resume", "nope")
    assert unknown.exit_code == 2
    assert "NOT_FOUND: no job with id 'nope'" in unknown.stderr
    assert "Traceback" not in unknown.output
    done = await _job(store, pb.JOB_STATE_SUCCEEDED)
    refused = await cli(target, "resume", done.id)
    assert refused.exit_code == 2
    assert f"FAILED_PRECONDITION: job {done.id} is SUCCEEDED" in refused.stderr
    assert (await store.get(done.id)).state == pb.JOB_STATE_SUCCEEDED


async def test_resume_job_rpc_status_codes(trainer: tuple[str, JobStore]) -> None:
    target, store = trainer
    running = await _job(store, pb.JOB_STATE_RUNNING)
    async with aio_channel(target, TOKEN) as channel:
        stub = trainer_pb2_grpc.TrainerStub(channel)
        for job_id, code, says in (
            ("", grpc.StatusCode.INVALID_ARGUMENT, "job_id: is required"),
            ("nope", grpc.StatusCode.NOT_FOUND, "no job with id 'nope'"),
            (running.id, grpc.StatusCode.FAILED_PRECONDITION, "is RUNNING"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.ResumeJob(trainer_pb2.ResumeJobRequest(job_id=job_id))
            assert info.value.code() == code and says in (info.value.details() or "")


async def test_submit_refuses_a_bad_idempotency_key_naming_it(
    trainer: tuple[str, JobStore],
) -> None:
    target, store = trainer
    async with aio_channel(target, TOKEN) as channel:
        stub = trainer_pb2_grpc.TrainerStub(channel)
        for key in ("k" * 256, "line\nbreak"):
            request = trainer_pb2.SubmitJobRequest(spec=pb.JobSpec(), idempotency_key=key)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.SubmitJob(request)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert (info.value.details() or "").startswith("idempotency_key: must be printable")
    assert await store.list() == []
