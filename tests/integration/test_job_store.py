"""The trainer's job store against a real redis-server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from artfleet.contracts.errors import NotFound
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
