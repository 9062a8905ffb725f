"""Jobs, their progress events and leases in Redis: jobs survive a trainer restart."""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from functools import partial
from typing import Any, TypeVar

import redis.asyncio as aioredis
import redis.exceptions
from google.protobuf.timestamp_pb2 import Timestamp

from artfleet.contracts.errors import FailedPrecondition, InvalidArgument, NotFound
from artfleet.runtime.outage import OutageClock
from artfleet.v1 import common_pb2 as pb

JOBS_INDEX = "artfleet:jobs"
TERMINAL = frozenset({pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED})
ACTIVE = (pb.JOB_STATE_RUNNING, pb.JOB_STATE_CANCELLING, pb.JOB_STATE_QUEUED)
RESUMABLE = frozenset({pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED})
# How long a submit's idempotency key names its job: a client's retries come well within.
IDEMPOTENCY_TTL_S = 24 * 3600
# How long a job's watch rides out Redis timeouts and reconnects in a row before its stream
# ends UNAVAILABLE: a busy machine's slow reply or a Redis restart, not a lasting outage.
WATCH_OUTAGE_S = 60.0

log = logging.getLogger(__name__)
T = TypeVar("T")

# KEYS: the idempotency key, the job's key, the jobs index. ARGV: "<job id> <config hash>",
# the key's TTL, the job's bytes, its index score, its id. The key and the job are written
# in one step, so a concurrent submit with the key finds the job it names. Returns what
# the key already held (that submit's job), or nil when this call made the job.
CREATE_ONCE = """
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
return false
"""


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


def _idempotency_key(key: str) -> str:
    return f"artfleet:job-idempotency:{key}"


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


def _new_job(spec: pb.JobSpec, config_hash: str) -> pb.Job:
    job = pb.Job(
        id=uuid.uuid4().hex[:12], spec=spec, state=pb.JOB_STATE_QUEUED, config_hash=config_hash
    )
    job.created_at.CopyFrom(_now())
    return job


def check_resumable(job: pb.Job) -> None:
    """Only a FAILED or CANCELLED job goes on; any other is refused naming its state (an
    active one is running already, a SUCCEEDED one has nothing left to run)."""
    if job.state in RESUMABLE:
        return
    state = pb.JobState.Name(job.state).removeprefix("JOB_STATE_")
    raise FailedPrecondition(
        f"job {job.id} is {state}: only a FAILED or CANCELLED job can be resumed"
    )


def _mark_resumed(job: pb.Job) -> pb.JobResume:
    """Queues `job` again; its record keeps what it was (the failure's reason included),
    its steps and evals stay, and the error of the run to come starts empty."""
    resume = job.resumes.add(state=job.state, error=job.error, completed_steps=job.completed_steps)
    resume.time.CopyFrom(_now())
    job.state = pb.JOB_STATE_QUEUED
    job.error = ""
    job.updated_at.CopyFrom(resume.time)
    return resume


class JobStore:
    """Owns every `artfleet:job*` and `artfleet:events:*` key (step batches:
    artfleet.contracts.batches)."""

    def __init__(self, redis: aioredis.Redis, watch_outage_s: float = WATCH_OUTAGE_S) -> None:
        # redis-py's return types are unions of bytes/str/awaitables: typed loosely here.
        self._redis: Any = redis
        self._watch_outage_s = watch_outage_s
        self._create_once = redis.register_script(CREATE_ONCE)

    async def create(self, spec: pb.JobSpec, config_hash: str = "") -> pb.Job:
        job = _new_job(spec, config_hash)
        await self.save(job)
        await self._redis.zadd(JOBS_INDEX, {job.id: time.time()})
        await self._queued(job)
        return job

    async def submit(
        self, spec: pb.JobSpec, config_hash: str, idempotency_key: str = ""
    ) -> tuple[pb.Job, bool]:
        """A new job, or the one `idempotency_key` made before (False: not new). The same
        key with another spec (config hash) is refused naming `idempotency_key`."""
        if not idempotency_key:
            return await self.create(spec, config_hash), True
        job = _new_job(spec, config_hash)
        job.updated_at.CopyFrom(job.created_at)
        held = await self._create_once(
            keys=[_idempotency_key(idempotency_key), _job_key(job.id), JOBS_INDEX],
            args=[
                f"{job.id} {config_hash}",
                IDEMPOTENCY_TTL_S,
                job.SerializeToString(),
                time.time(),
                job.id,
            ],
        )
        if held is None:
            await self._queued(job)
            return job, True
        job_id, _, held_hash = held.decode().partition(" ")
        if held_hash != config_hash:
            raise InvalidArgument(
                f"was used for job {job_id} with another spec (config {held_hash}, this one "
                f"{config_hash}): send a new key for a new job",
                "idempotency_key",
            )
        return await self.get(job_id), False

    async def _queued(self, job: pb.Job) -> None:
        await self.emit(job.id, pb.ProgressEvent(kind=pb.EVENT_KIND_STATE, state=job.state))

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

    async def runnable(self, exclude: Collection[str] = ()) -> builtins.list[pb.Job]:
        """The jobs to run, in order: those that were running (resume) first, then the
        queued ones, oldest first; none of `exclude` (the ones this trainer runs)."""
        jobs = [j for j in reversed(await self._all()) if j.id not in exclude]
        return [job for wanted in ACTIVE for job in jobs if job.state == wanted]

    async def next_runnable(self) -> pb.Job | None:
        """The job to run next (the first of `runnable`)."""
        jobs = await self.runnable()
        return jobs[0] if jobs else None

    async def set_state(self, job: pb.Job, state: int, error: str = "", note: str = "") -> None:
        """The job's new state, saved and announced; `error` is kept on the job, `note`
        only says something of the state in its event."""
        job.state = state  # type: ignore[assignment]
        if error:
            job.error = error
        await self.save(job)
        event = pb.ProgressEvent(kind=pb.EVENT_KIND_STATE, state=job.state, message=error or note)
        await self.emit(job.id, event)

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

    async def resume(self, job_id: str) -> pb.Job:
        """A FAILED or CANCELLED job back in the queue (`_mark_resumed`); the runner goes on
        after its last checkpoint. NotFound, or FailedPrecondition naming its state."""
        key = _job_key(job_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            while True:
                # WATCH: of two resumes at once (or a resume and a cancel) one wins; the
                # other reads the record again, and a second resume is refused as QUEUED.
                try:
                    await pipe.watch(key)
                    raw = await pipe.get(key) if job_id else None
                    if raw is None:
                        raise NotFound(f"no job with id {job_id!r}")
                    job = pb.Job.FromString(raw)
                    check_resumable(job)
                    resume = _mark_resumed(job)
                    pipe.multi()
                    pipe.set(key, job.SerializeToString())
                    # The cancel flag would end the run at once; the runner takes the mark.
                    pipe.delete(f"{key}:cancel")
                    pipe.set(f"{key}:resumed", b"1")
                    await pipe.execute()
                    break
                except redis.exceptions.WatchError:
                    continue
        was = pb.JobState.Name(resume.state).removeprefix("JOB_STATE_")
        message = f"resumed ({was}) after step {resume.completed_steps}"
        await self.emit(
            job.id, pb.ProgressEvent(kind=pb.EVENT_KIND_STATE, state=job.state, message=message)
        )
        return job

    async def resume_pending(self, job_id: str) -> bool:
        """Whether the job was resumed and the runner has yet to start the steps it had
        begun afresh (`resume_handled` after, so an outage in between repeats that)."""
        return bool(await self._redis.exists(f"{_job_key(job_id)}:resumed"))

    async def resume_handled(self, job_id: str) -> None:
        await self._redis.delete(f"{_job_key(job_id)}:resumed")

    # ------------------------------------------------------------ train ledger
    async def record_step(self, job: pb.Job, entry: TrainedStep, done: pb.ProgressEvent) -> int:
        """After a step's checkpoint is saved, its whole record in one transaction: the
        ledger entry (what it trained on), the job (its summary and completed_steps) and the
        step's event. A trainer that stops anywhere leaves all of them or none, and none
        means the checkpoint is not taken as done (JobRunner._rewind_to_record). Returns how
        many times the step was trained: more than once is a bug the chaos suite looks for."""
        key = f"{_job_key(job.id)}:trained"
        job.updated_at.CopyFrom(_now())
        event = self._stamped(job.id, done, await self._redis.incr(f"{_events_key(job.id)}:seq"))
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, json.dumps(dataclasses.asdict(entry)))
            pipe.hincrby(f"{key}:count", str(entry.step), 1)
            pipe.set(_job_key(job.id), job.SerializeToString())
            pipe.xadd(_events_key(job.id), {"e": event.SerializeToString()})
            _, count, *_ = await pipe.execute()
        return int(count)

    async def trained_ledger(self, job_id: str) -> builtins.list[TrainedStep]:
        raws = await self._redis.lrange(f"{_job_key(job_id)}:trained", 0, -1)
        return [TrainedStep(**json.loads(raw)) for raw in raws]

    # ------------------------------------------------------------ events
    async def emit(self, job_id: str, event: pb.ProgressEvent) -> None:
        seq = await self._redis.incr(f"{_events_key(job_id)}:seq")
        event = self._stamped(job_id, event, seq)
        await self._redis.xadd(_events_key(job_id), {"e": event.SerializeToString()})

    @staticmethod
    def _stamped(job_id: str, event: pb.ProgressEvent, seq: int) -> pb.ProgressEvent:
        """The event with its job, sequence number (a gap, where a transaction never ran,
        is harmless: readers go by order) and time."""
        event.job_id, event.seq = job_id, seq
        event.time.CopyFrom(_now())
        return event

    async def events(
        self, job_id: str, from_seq: int = 0, block_ms: int = 1000
    ) -> AsyncIterator[pb.ProgressEvent]:
        """Replays then follows the job's events until it reaches a terminal state: its
        last one, as a resumed job has one before each resume. A Redis timeout or a lost
        connection is ridden out (`_riding_out`): the read goes on after the last entry
        seen, so no event is lost or repeated."""
        job = await self.get(job_id)
        key = _events_key(job_id)
        last_id: bytes | str = "0-0"
        while True:
            read = partial(self._redis.xread, {key: last_id}, block=block_ms)
            reply = await self._riding_out(read)
            for _stream, entries in reply or []:
                for i, (entry_id, fields) in enumerate(entries):
                    last_id = entry_id
                    event = pb.ProgressEvent.FromString(fields[b"e"])
                    if event.seq >= from_seq:
                        yield event
                    if event.kind != pb.EVENT_KIND_STATE or event.state not in TERMINAL:
                        continue
                    if i + 1 == len(entries) and not await self._went_on(job_id, entry_id):
                        return
            if not reply:
                job = await self._riding_out(partial(self.get, job_id))
                if job.state in TERMINAL and last_id != "0-0":
                    return

    async def _went_on(self, job_id: str, entry_id: bytes) -> bool:
        """Whether events follow `entry_id` (nothing but a resume follows a terminal state)."""
        key = _events_key(job_id)
        return bool(await self._riding_out(partial(self._redis.xread, {key: entry_id}, count=1)))

    async def _riding_out(self, read: Callable[[], Awaitable[T]]) -> T:
        """`read()`, again after a growing pause while Redis times out or reconnects; past
        `watch_outage_s` of failures in a row the last error goes up (UNAVAILABLE)."""
        outage = OutageClock(self._watch_outage_s)
        pause_s = 0.2
        while True:
            try:
                return await read()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                outage.started()
                if outage.spent():
                    raise
                log.info("job watch: Redis %s; reading again in %.1fs", type(exc).__name__, pause_s)
            await asyncio.sleep(pause_s)
            pause_s = min(pause_s * 2, 5.0)

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
