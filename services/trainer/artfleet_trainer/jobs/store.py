"""Jobs, their progress events and leases in Redis: jobs survive a trainer restart."""

from __future__ import annotations

import builtins
import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from google.protobuf.timestamp_pb2 import Timestamp

from artfleet.contracts.errors import NotFound
from artfleet.v1 import common_pb2 as pb

JOBS_INDEX = "artfleet:jobs"
TERMINAL = frozenset({pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED})
ACTIVE = (pb.JOB_STATE_RUNNING, pb.JOB_STATE_CANCELLING, pb.JOB_STATE_QUEUED)


@dataclasses.dataclass(frozen=True)
class TrainedStep:
    """One entry of a job's train ledger: a step trained and checkpointed."""

    step: int
    groups: list[str]  # group ids trained on
    trajectories: int  # trajectories trained on
    dropped: int  # trajectories the reward service's policies dropped (RewardOutcome)
    failed_groups: int  # groups whose rollout failed (every episode, or the group)


def _job_key(job_id: str) -> str:
    return f"artfleet:job:{job_id}"


def _events_key(job_id: str) -> str:
    return f"artfleet:events:{job_id}"


def set_queue_positions(newest_first: list[pb.Job], *also: pb.Job) -> None:
    """Queued jobs run in submission order: the oldest queued is position 1."""
    position = 0
    positions = {}
    for job in reversed(newest_first):
        if job.state == pb.JOB_STATE_QUEUED:
            position += 1
            positions[job.id] = position
    for job in (*newest_first, *also):
        job.queue_position = positions.get(job.id, 0)


def _now() -> Timestamp:
    ts = Timestamp()
    ts.GetCurrentTime()
    return ts


class JobStore:
    """Owns every `artfleet:job*` and `artfleet:events:*` key (step batches:
    artfleet.contracts.batches)."""

    def __init__(self, redis: aioredis.Redis) -> None:
        # redis-py's return types are unions of bytes/str/awaitables: typed loosely here.
        self._redis: Any = redis

    async def create(self, spec: pb.JobSpec, config_hash: str = "") -> pb.Job:
        job = pb.Job(
            id=uuid.uuid4().hex[:12], spec=spec, state=pb.JOB_STATE_QUEUED, config_hash=config_hash
        )
        job.created_at.CopyFrom(_now())
        await self.save(job)
        await self._redis.zadd(JOBS_INDEX, {job.id: time.time()})
        await self.emit(job.id, pb.ProgressEvent(kind=pb.EVENT_KIND_STATE, state=job.state))
        return job

    async def save(self, job: pb.Job) -> None:
        job.updated_at.CopyFrom(_now())
        await self._redis.set(_job_key(job.id), job.SerializeToString())

    async def get(self, job_id: str) -> pb.Job:
        raw = await self._redis.get(_job_key(job_id)) if job_id else None
        if raw is None:
            raise NotFound(f"no job with id {job_id!r}")
        return pb.Job.FromString(raw)

    async def _all(self) -> list[pb.Job]:
        """Every job, newest first."""
        ids = await self._redis.zrevrange(JOBS_INDEX, 0, -1)
        raws = await self._redis.mget([_job_key(i.decode()) for i in ids]) if ids else []
        return [pb.Job.FromString(raw) for raw in raws if raw is not None]

    async def list(self, limit: int = 0, experiment: str = "") -> list[pb.Job]:
        """Newest first, each queued job with its queue position (1 = runs next)."""
        jobs = await self._all()
        set_queue_positions(jobs)
        if experiment:
            jobs = [j for j in jobs if (j.spec.experiment or "default") == experiment]
        return jobs[:limit] if limit > 0 else jobs

    async def get_with_position(self, job_id: str) -> pb.Job:
        job = await self.get(job_id)
        if job.state == pb.JOB_STATE_QUEUED:
            set_queue_positions(await self._all(), job)
        return job

    async def next_runnable(self) -> pb.Job | None:
        """The job to run next: one that was running (resume) first, else the oldest queued."""
        jobs = list(reversed(await self._all()))
        for wanted in ACTIVE:
            for job in jobs:
                if job.state == wanted:
                    return job
        return None

    async def set_state(self, job: pb.Job, state: int, error: str = "") -> None:
        job.state = state  # type: ignore[assignment]
        if error:
            job.error = error
        await self.save(job)
        await self.emit(
            job.id, pb.ProgressEvent(kind=pb.EVENT_KIND_STATE, state=job.state, message=error)
        )

    async def request_cancel(self, job_id: str) -> pb.Job:
        """Queued jobs end now; a running one ends after its current step."""
        job = await self.get(job_id)
        if job.state in TERMINAL:
            return job
        # The flag, not the job record, is what the runner reads: it rewrites the record.
        await self._redis.set(f"{_job_key(job_id)}:cancel", b"1")
        if job.state == pb.JOB_STATE_QUEUED:
            await self.set_state(job, pb.JOB_STATE_CANCELLED)
        else:
            await self.set_state(job, pb.JOB_STATE_CANCELLING)
        return job

    async def cancel_requested(self, job_id: str) -> bool:
        return bool(await self._redis.exists(f"{_job_key(job_id)}:cancel"))

    # ------------------------------------------------------------ train ledger
    async def record_trained(self, job_id: str, entry: TrainedStep) -> int:
        """After a step's checkpoint is saved: appends what it trained on to the job's
        ledger (a list, one JSON entry per training) and returns how many times that step
        was trained. More than once is a bug the chaos suite looks for."""
        key = f"{_job_key(job_id)}:trained"
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, json.dumps(dataclasses.asdict(entry)))
            pipe.hincrby(f"{key}:count", str(entry.step), 1)
            _, count = await pipe.execute()
        return int(count)

    async def trained_ledger(self, job_id: str) -> builtins.list[TrainedStep]:
        raws = await self._redis.lrange(f"{_job_key(job_id)}:trained", 0, -1)
        return [TrainedStep(**json.loads(raw)) for raw in raws]

    # ------------------------------------------------------------ events
    async def emit(self, job_id: str, event: pb.ProgressEvent) -> None:
        event.job_id = job_id
        event.seq = await self._redis.incr(f"{_events_key(job_id)}:seq")
        event.time.CopyFrom(_now())
        await self._redis.xadd(_events_key(job_id), {"e": event.SerializeToString()})

    async def events(
        self, job_id: str, from_seq: int = 0, block_ms: int = 1000
    ) -> AsyncIterator[pb.ProgressEvent]:
        """Replays then follows the job's events until it reaches a terminal state."""
        job = await self.get(job_id)
        last_id = "0-0"
        while True:
            reply = await self._redis.xread({_events_key(job_id): last_id}, block=block_ms)
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    last_id = entry_id
                    event = pb.ProgressEvent.FromString(fields[b"e"])
                    if event.seq >= from_seq:
                        yield event
                    if event.kind == pb.EVENT_KIND_STATE and event.state in TERMINAL:
                        return
            if not reply:
                job = await self.get(job_id)
                if job.state in TERMINAL and last_id != "0-0":
                    return

    # ------------------------------------------------------------ leases
    async def acquire_lease(self, job_id: str, owner: str, ttl_s: float) -> bool:
        """One trainer runs a job at a time; the lease lapses if its trainer dies."""
        key = f"{_job_key(job_id)}:lease"
        ms = int(ttl_s * 1000)
        if await self._redis.set(key, owner, nx=True, px=ms):
            return True
        current = await self._redis.get(key)
        if current is not None and current.decode() == owner:
            await self._redis.pexpire(key, ms)
            return True
        return False

    async def release_lease(self, job_id: str, owner: str) -> None:
        key = f"{_job_key(job_id)}:lease"
        current = await self._redis.get(key)
        if current is not None and current.decode() == owner:
            await self._redis.delete(key)
