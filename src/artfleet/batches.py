"""The step-batch contract: how rollout workers hand finished groups to the trainer.

Every key, TTL and rule of the hand-off lives here; the worker and the trainer only call
`StepBatches`. Keys of one step (the `{job:step}` hash tag keeps them in one cluster slot,
so the scripts below stay atomic there too):

    artfleet:batch:{<job>:<step>}:groups   hash  group id -> BatchGroup bytes (batch.proto)
    artfleet:batch:{<job>:<step>}:status   hash  group id -> GroupState number (a few bytes)
    artfleet:batch:{<job>:<step>}:notify   list  one entry per stored group: wakes the waiter
    artfleet:batch:{<job>:<step>}:closed   string, set once the step's checkpoint is saved

Rules:
- A publish stores a group only over a strictly lower state (GroupState numbers are ranks),
  atomically (one Lua script): a failure never replaces anything, a scored group replaces
  a failure or a drop, and a redelivered task or a second worker finishing the same group
  is counted once (the status hash is the count).
- The trainer waits on `status` (small) and the notify list (BLPOP); it decodes nothing
  until the wait is over, then reads each answered group once (HMGET).
- Restart: a step that runs again keeps its final groups (scored, fail_job) and forgets
  the others (failed, dropped), which are dispatched again.
- `close` after the step's checkpoint is saved deletes the batch and marks the step
  closed; publishes into a closed step are refused, so stragglers recreate nothing.
- BATCH_TTL_S is only a safety net for steps nobody closes (a job that failed, a trainer
  gone for good). Expiry costs at most re-running groups: a trainer that resumes a step
  dispatches again every group it does not find.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, cast

from artfleet.v1 import batch_pb2, rollout_pb2

BATCH_TTL_S = 3 * 24 * 3600  # > the longest gather deadline (1 day) plus an outage
WAKE_S = 5.0  # longest BLPOP: bounds how late a lost connection or the deadline is seen

FAILED = batch_pb2.GROUP_STATE_FAILED
DROPPED = batch_pb2.GROUP_STATE_DROPPED
SCORED = batch_pb2.GROUP_STATE_SCORED
FAIL_JOB = batch_pb2.GROUP_STATE_FAIL_JOB
FINAL_STATES = frozenset({SCORED, FAIL_JOB})  # kept across a restart; never run again

# KEYS: groups, status, notify, closed. ARGV: group id, state, payload, ttl.
_PUBLISH = """
if redis.call('EXISTS', KEYS[4]) == 1 then return 'closed' end
local current = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if current >= tonumber(ARGV[2]) then return 'kept' end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[3], ARGV[1])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[4]) end
return 'stored'
"""

# KEYS: groups, status. ARGV: the lowest final state. Returns the group ids kept.
_RESTART = """
local kept = {}
local entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  if tonumber(entries[i + 1]) >= tonumber(ARGV[1]) then
    table.insert(kept, entries[i])
  else
    redis.call('HDEL', KEYS[1], entries[i])
    redis.call('HDEL', KEYS[2], entries[i])
  end
end
return kept
"""


class Published(Enum):
    STORED = "stored"
    KEPT = "kept"  # an equal or better answer was already there
    CLOSED = "closed"  # the step is over: nothing is stored


class QuorumNotReached(TimeoutError):
    """The gather deadline passed with fewer answered groups than the quorum."""


@dataclass(frozen=True)
class StepKeys:
    job_id: str
    step: int

    def _key(self, part: str) -> str:
        return f"artfleet:batch:{{{self.job_id}:{self.step}}}:{part}"

    @property
    def pattern(self) -> str:
        """Every key of the step (for SCAN), the closed marker included."""
        return self._key("*")

    @property
    def groups(self) -> str:
        return self._key("groups")

    @property
    def status(self) -> str:
        return self._key("status")

    @property
    def notify(self) -> str:
        return self._key("notify")

    @property
    def closed(self) -> str:
        return self._key("closed")


def classify(response: rollout_pb2.RunGroupResponse) -> batch_pb2.GroupState:
    """The reward service's verdict first: fail_job and drop_group outrank trajectories."""
    if response.reward.fail_job:
        return FAIL_JOB
    if response.reward.group_dropped:
        return DROPPED
    return SCORED if response.group.trajectories else FAILED


def to_batch_group(group_id: str, response: rollout_pb2.RunGroupResponse) -> batch_pb2.BatchGroup:
    """What the trainer reads of a response: the group and the reward outcome, no episodes."""
    entry = batch_pb2.BatchGroup(group_id=group_id, state=classify(response))
    entry.group.CopyFrom(response.group)
    entry.reward.CopyFrom(response.reward)
    return entry


@dataclass(frozen=True)
class StepProgress:
    """How far a step is, from the status hash alone (no group is decoded)."""

    states: Mapping[str, batch_pb2.GroupState]
    expected: int

    @property
    def answered(self) -> int:
        return len(self.states)

    @property
    def complete(self) -> bool:
        return self.answered >= self.expected

    def count(self, state: batch_pb2.GroupState) -> int:
        return sum(1 for s in self.states.values() if s == state)


def progress_of(raw: Mapping[bytes, bytes], group_ids: Iterable[str]) -> StepProgress:
    wanted = set(group_ids)
    states = {k.decode(): cast(batch_pb2.GroupState, int(v)) for k, v in raw.items()}
    return StepProgress({k: v for k, v in states.items() if k in wanted}, len(wanted))


def gather_done(progress: StepProgress, quorum: int, expired: bool) -> bool:
    """Every group answered, or past the deadline with a quorum; raises below it."""
    if progress.complete:
        return True
    if not expired:
        return False
    if progress.answered >= quorum:
        return True
    raise QuorumNotReached(
        f"{progress.answered}/{progress.expected} groups answered by the deadline "
        f"(quorum {quorum}): are rollout workers running?"
    )


@dataclass
class Gathered:
    """A step's answered groups in group-id order, each decoded once."""

    groups: list[batch_pb2.BatchGroup]
    expected: int
    waited_s: float
    counts: Counter[int] = field(default_factory=Counter)

    def of_state(self, state: batch_pb2.GroupState) -> list[batch_pb2.BatchGroup]:
        return [g for g in self.groups if g.state == state]


def _read_timeout(redis: Any) -> float | None:
    """The client's read timeout, as its connections will have it (defaults included)."""
    pool = redis.connection_pool
    probe = pool.connection_class(**pool.connection_kwargs)  # not connected: nothing to close
    return cast(float | None, probe.socket_timeout)


class StepBatches:
    """The batch contract over an asyncio Redis client (decode_responses must be off)."""

    def __init__(self, redis: Any, ttl_s: int = BATCH_TTL_S, wake_s: float = WAKE_S) -> None:
        # redis-py's return types are unions of bytes/str/awaitables: typed loosely here.
        self._redis: Any = redis
        self._ttl_s = ttl_s
        # A BLPOP must end before the client's own read timeout (redis-py's default is
        # 5 s), or the client gives up on the reply and the wait fails.
        socket_timeout = _read_timeout(redis)
        self._wake_s = min(wake_s, socket_timeout / 2) if socket_timeout else wake_s
        self._publish = redis.register_script(_PUBLISH)
        self._restart = redis.register_script(_RESTART)

    # ------------------------------------------------------------ rollout side
    async def needs_run(self, job_id: str, step: int, group_id: str) -> bool:
        """False for a redelivered task whose group is final, or a step already closed."""
        keys = StepKeys(job_id, step)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.exists(keys.closed)
            pipe.hget(keys.status, group_id)
            closed, state = await pipe.execute()
        return not closed and (state is None or int(state) not in FINAL_STATES)

    async def publish(
        self, job_id: str, step: int, group_id: str, response: rollout_pb2.RunGroupResponse
    ) -> Published:
        entry = to_batch_group(group_id, response)
        return await self.publish_entry(job_id, step, entry)

    async def publish_entry(self, job_id: str, step: int, entry: batch_pb2.BatchGroup) -> Published:
        keys = StepKeys(job_id, step)
        payload = entry.SerializeToString()
        reply = await self._publish(
            keys=[keys.groups, keys.status, keys.notify, keys.closed],
            args=[entry.group_id, int(entry.state), payload, self._ttl_s],
        )
        return Published(reply.decode() if isinstance(reply, bytes) else reply)

    # ------------------------------------------------------------ trainer side
    async def restart(self, job_id: str, step: int) -> set[str]:
        """Before a step is dispatched (again): forget non-final groups, return the kept ids."""
        keys = StepKeys(job_id, step)
        kept = await self._restart(keys=[keys.groups, keys.status], args=[min(FINAL_STATES)])
        return {k.decode() for k in kept}

    async def progress(self, job_id: str, step: int, group_ids: Sequence[str]) -> StepProgress:
        raw = await self._redis.hgetall(StepKeys(job_id, step).status)
        return progress_of(raw, group_ids)

    async def wait(
        self, job_id: str, step: int, group_ids: Sequence[str], timeout_s: float, quorum: int
    ) -> StepProgress:
        """Until every group answered, or `timeout_s` passed with `quorum` answered."""
        keys = StepKeys(job_id, step)
        deadline = time.monotonic() + timeout_s
        while True:
            # Emptying notify and reading status in one transaction loses no wake-up: a
            # group stored after it leaves an entry for the BLPOP below.
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(keys.notify)
                pipe.hgetall(keys.status)
                _, raw = await pipe.execute()
            progress = progress_of(raw, group_ids)
            remaining = deadline - time.monotonic()
            if gather_done(progress, quorum, expired=remaining <= 0):
                return progress
            await self._redis.blpop([keys.notify], timeout=max(0.01, min(remaining, self._wake_s)))

    async def read(
        self, job_id: str, step: int, group_ids: Sequence[str]
    ) -> list[batch_pb2.BatchGroup]:
        """The stored groups among `group_ids`, in that order, each decoded once."""
        if not group_ids:
            return []
        raws = await self._redis.hmget(StepKeys(job_id, step).groups, list(group_ids))
        return [batch_pb2.BatchGroup.FromString(raw) for raw in raws if raw is not None]

    async def gather(
        self, job_id: str, step: int, group_ids: Sequence[str], timeout_s: float, quorum: int
    ) -> Gathered:
        start = time.monotonic()
        progress = await self.wait(job_id, step, group_ids, timeout_s, quorum)
        answered = sorted(progress.states)
        groups = await self.read(job_id, step, answered)
        counts = Counter(int(g.state) for g in groups)
        return Gathered(groups, len(set(group_ids)), time.monotonic() - start, counts)

    async def close(self, job_id: str, step: int) -> None:
        """After the step's checkpoint is saved: the batch goes, late publishes are refused."""
        keys = StepKeys(job_id, step)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.groups, keys.status, keys.notify)
            pipe.set(keys.closed, b"1", ex=self._ttl_s)
            await pipe.execute()
