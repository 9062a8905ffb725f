"""The trainer's job store against a real redis-server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from artfleet.contracts.errors import FailedPrecondition, InvalidArgument, NotFound
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs.store import JobStore

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[JobStore]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    yield JobStore(client)
    await client.aclose()


async def test_jobs_persist_and_list_newest_first(store: JobStore) -> None:
    first = await store.create(pb.JobSpec(name="a"))
    second = await store.create(pb.JobSpec(name="b"))
    assert (await store.get(first.id)).spec.name == "a"
    assert [j.id for j in await store.list()] == [second.id, first.id]
    assert [j.id for j in await store.list(limit=1)] == [second.id]
    with pytest.raises(NotFound):
        await store.get("nope")


async def test_running_jobs_resume_before_queued_ones(store: JobStore) -> None:
    queued = await store.create(pb.JobSpec(name="q"))
    running = await store.create(pb.JobSpec(name="r"))
    assert (await store.next_runnable()).id == queued.id  # type: ignore[union-attr]
    await store.set_state(running, pb.JOB_STATE_RUNNING)
    assert (await store.next_runnable()).id == running.id  # type: ignore[union-attr]
    await store.set_state(running, pb.JOB_STATE_SUCCEEDED)
    await store.set_state(queued, pb.JOB_STATE_FAILED, error="x")
    assert await store.next_runnable() is None


async def test_cancel_queued_ends_now_running_flags(store: JobStore) -> None:
    queued = await store.create(pb.JobSpec())
    assert (await store.request_cancel(queued.id)).state == pb.JOB_STATE_CANCELLED
    running = await store.create(pb.JobSpec())
    await store.set_state(running, pb.JOB_STATE_RUNNING)
    assert (await store.request_cancel(running.id)).state == pb.JOB_STATE_CANCELLING
    assert await store.cancel_requested(running.id)
    done = await store.create(pb.JobSpec())
    await store.set_state(done, pb.JOB_STATE_SUCCEEDED)
    assert (await store.request_cancel(done.id)).state == pb.JOB_STATE_SUCCEEDED


async def test_events_replay_from_seq_and_end_at_terminal_state(store: JobStore) -> None:
    job = await store.create(pb.JobSpec())
    await store.set_state(job, pb.JOB_STATE_RUNNING)
    await store.emit(job.id, pb.ProgressEvent(kind=pb.EVENT_KIND_STEP_DONE, step=1))
    await store.set_state(job, pb.JOB_STATE_SUCCEEDED)
    events = [e async for e in store.events(job.id)]
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert events[-1].state == pb.JOB_STATE_SUCCEEDED
    assert [e.seq async for e in store.events(job.id, from_seq=3)] == [3, 4]


async def test_lease_is_exclusive(store: JobStore) -> None:
    job = await store.create(pb.JobSpec())
    assert await store.acquire_lease(job.id, "a", 5)
    assert not await store.acquire_lease(job.id, "b", 5)
    assert await store.acquire_lease(job.id, "a", 5)  # renewal
    await store.release_lease(job.id, "b")  # not b's: no effect
    assert not await store.acquire_lease(job.id, "b", 5)
    await store.release_lease(job.id, "a")
    assert await store.acquire_lease(job.id, "b", 5)


async def test_concurrent_submits_with_one_key_make_one_job(store: JobStore) -> None:
    submits = [store.submit(pb.JobSpec(name="a"), "hash-a", "key-1") for _ in range(8)]
    results = await asyncio.gather(*submits)
    assert len({job.id for job, _ in results}) == 1
    assert [created for _, created in results].count(True) == 1
    (only,) = await store.list()
    assert only.id == results[0][0].id and only.config_hash == "hash-a"
    other, created = await store.submit(pb.JobSpec(name="a"), "hash-a", "key-2")
    assert created and other.id != only.id  # another key, another job
    assert len(await store.list()) == 2


async def test_a_key_sent_with_another_spec_is_refused_naming_it(store: JobStore) -> None:
    first, _ = await store.submit(pb.JobSpec(name="a"), "hash-a", "key-1")
    with pytest.raises(InvalidArgument) as info:
        await store.submit(pb.JobSpec(name="b"), "hash-b", "key-1")
    assert info.value.field == "idempotency_key"
    assert first.id in info.value.message and "hash-a" in info.value.message
    assert [j.id for j in await store.list()] == [first.id]


async def _failed_at_step_one(store: JobStore) -> pb.Job:
    job = await store.create(pb.JobSpec(name="a", steps=3), config_hash="hash-a")
    await store.set_state(job, pb.JOB_STATE_RUNNING)
    job.completed_steps = 1
    job.steps.add(step=1, reward_mean=0.5)
    job.evals.add(step=1, split="test")
    await store.save(job)
    await store.set_state(job, pb.JOB_STATE_FAILED, error="RuntimeError: step 2 went wrong")
    return job


async def test_resume_queues_a_failed_job_with_its_history_and_reason(store: JobStore) -> None:
    job = await _failed_at_step_one(store)
    resumed = await store.resume(job.id)
    stored = await store.get(job.id)
    for got in (resumed, stored):
        assert got.state == pb.JOB_STATE_QUEUED and got.error == ""
        assert got.completed_steps == 1 and got.config_hash == "hash-a"
        assert [s.step for s in got.steps] == [1] and [e.step for e in got.evals] == [1]
        (resume,) = got.resumes
        assert resume.state == pb.JOB_STATE_FAILED and resume.completed_steps == 1
        assert resume.error == "RuntimeError: step 2 went wrong" and resume.HasField("time")
    assert await store.resume_pending(job.id)
    assert (await store.next_runnable()).id == job.id  # type: ignore[union-attr]
    # The event stream goes on past the FAILED state: the resumed run follows it.
    await store.set_state(stored, pb.JOB_STATE_SUCCEEDED)
    events = [e async for e in store.events(job.id, block_ms=100)]
    states = [pb.JobState.Name(e.state) for e in events if e.kind == pb.EVENT_KIND_STATE]
    assert states[-3:] == ["JOB_STATE_FAILED", "JOB_STATE_QUEUED", "JOB_STATE_SUCCEEDED"]
    assert events[-2].message == "resumed (FAILED) after step 1"


async def test_a_job_cancelled_while_queued_resumes_without_its_cancel_flag(
    store: JobStore,
) -> None:
    job = await store.create(pb.JobSpec(name="a"))
    await store.request_cancel(job.id)
    assert await store.cancel_requested(job.id)
    resumed = await store.resume(job.id)
    assert resumed.state == pb.JOB_STATE_QUEUED and resumed.completed_steps == 0
    assert resumed.resumes[0].state == pb.JOB_STATE_CANCELLED
    assert not await store.cancel_requested(job.id)


async def test_resume_refuses_jobs_not_failed_or_cancelled_naming_the_state(
    store: JobStore,
) -> None:
    job = await store.create(pb.JobSpec(name="a"))
    with pytest.raises(FailedPrecondition, match=f"job {job.id} is QUEUED"):
        await store.resume(job.id)
    await store.set_state(job, pb.JOB_STATE_SUCCEEDED)
    with pytest.raises(FailedPrecondition, match="is SUCCEEDED: only a FAILED or CANCELLED"):
        await store.resume(job.id)
    with pytest.raises(NotFound):
        await store.resume("nope")
    assert not (await store.get(job.id)).resumes


async def test_concurrent_resumes_queue_the_job_once(store: JobStore) -> None:
    job = await _failed_at_step_one(store)
    results = await asyncio.gather(
        *(store.resume(job.id) for _ in range(4)), return_exceptions=True
    )
    assert sum(isinstance(r, pb.Job) for r in results) == 1
    assert all(isinstance(r, (pb.Job, FailedPrecondition)) for r in results)
    assert len((await store.get(job.id)).resumes) == 1
