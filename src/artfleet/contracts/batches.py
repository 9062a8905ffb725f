"""The step-batch contract: how rollout workers hand finished groups to the trainer.

Every key, TTL and rule of the hand-off lives here; the worker and the trainer only call
`StepBatches`. Keys of one step (the `{job:step}` hash tag keeps them in one cluster slot,
so its scripts, in `batch_scripts`, stay atomic there too):

    artfleet:batch:{<job>:<step>}:groups   hash  group id -> BatchGroup bytes (batch.proto)
    artfleet:batch:{<job>:<step>}:status   hash  group id -> GroupState number (a few bytes)
    artfleet:batch:{<job>:<step>}:notify   list  one entry per stored group: wakes the waiter
    artfleet:batch:{<job>:<step>}:closed   string, set once the step's checkpoint is saved
    artfleet:batch:{<job>:<step>}:claims   hash  group id -> token of the run that claimed it
    artfleet:batch:{<job>:<step>}:lease:<group id>
                                           string, that token, PX the lease (GROUP_LEASE_S)

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
- `discard`: a resumed job (it had FAILED or was CANCELLED) starts the steps it had begun
  afresh, final groups included (a fail_job verdict kept would fail it again).
- Groups survive their worker. A worker claims a group before running it (the claims
  entry and the lease, atomically; refused when the group is final, the step closed, or
  another run holds a live lease) and renews the lease every lease/3 while the group runs;
  its publish deletes its own lease and claim. A group that is claimed, not answered, and
  whose lease is gone lost its worker: the trainer's wait, on every wake (at most WAKE_S
  apart), takes those claims away atomically (`lost`) and dispatches the groups again, so
  a crash costs the lease plus one wake plus the group's own run time, and no group is
  dispatched twice for one loss. A late publish by the run presumed dead is counted once
  like any duplicate; a stale Celery redelivery finds the group final, or held.
- BATCH_TTL_S is only a safety net for steps nobody closes (a job that failed, a trainer
  gone for good). Expiry costs at most re-running groups: a trainer that resumes a step
  dispatches again every group it does not find.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, cast

from artfleet.contracts import batch_scripts as scripts
from artfleet.v1 import batch_pb2, rollout_pb2

BATCH_TTL_S = 3 * 24 * 3600  # > the longest gather deadline (1 day) plus an outage
WAKE_S = 5.0  # longest BLPOP: bounds how late a lost connection, lease or the deadline is seen
GROUP_LEASE_S = 30.0  # a running group's lease: how soon a dead worker's group runs again

FAILED = batch_pb2.GROUP_STATE_FAILED
DROPPED = batch_pb2.GROUP_STATE_DROPPED
SCORED = batch_pb2.GROUP_STATE_SCORED
FAIL_JOB = batch_pb2.GROUP_STATE_FAIL_JOB
FINAL_STATES = frozenset({SCORED, FAIL_JOB})  # kept across a restart; never run again

OnLost = Callable[[list[str]], Awaitable[None]]  # the trainer's re-dispatch of lost groups


class Published(Enum):
    STORED = "stored"
    KEPT = "kept"  # an equal or better answer was already there
    CLOSED = "closed"  # the step is over: nothing is stored


class Claim(Enum):
    CLAIMED = "claimed"  # run it, renew the lease, publish with the token
    FINAL = "final"  # a redelivered task whose group is final already
    CLOSED = "closed"  # the step is over
    HELD = "held"  # another run holds a live lease on the group: it is watched already


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

    @property
    def claims(self) -> str:
        return self._key("claims")

    @property
    def lease_prefix(self) -> str:
        return self._key("lease:")

    def lease(self, group_id: str) -> str:
        return self.lease_prefix + group_id


def classify(response: rollout_pb2.RunGroupResponse) -> batch_pb2.GroupState:
    """The reward service's verdict first: fail_job and drop_group outrank trajectories."""
    if response.outcome.fail_job:
        return FAIL_JOB
    if response.outcome.group_dropped:
        return DROPPED
    return SCORED if response.group.trajectories else FAILED


def to_batch_group(group_id: str, response: rollout_pb2.RunGroupResponse) -> batch_pb2.BatchGroup:
    """What the trainer reads of a response: the group and the reward outcome, no episodes."""
    entry = batch_pb2.BatchGroup(group_id=group_id, state=classify(response))
    entry.group.CopyFrom(response.group)
    entry.outcome.CopyFrom(response.outcome)
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
    requeued: int = 0  # groups dispatched again because their worker died

    def of_state(self, state: batch_pb2.GroupState) -> list[batch_pb2.BatchGroup]:
        return [g for g in self.groups if g.state == state]


def _read_timeout(redis: Any) -> float | None:
    """The client's read timeout, as its connections will have it (defaults included)."""
    pool = redis.connection_pool
    probe = pool.connection_class(**pool.connection_kwargs)  # not connected: nothing to close
    return cast(float | None, probe.socket_timeout)


class StepBatches:
    """The batch contract over an asyncio Redis client (decode_responses must be off)."""

    def __init__(
        self,
        redis: Any,
        ttl_s: int = BATCH_TTL_S,
        wake_s: float = WAKE_S,
        lease_s: float = GROUP_LEASE_S,
    ) -> None:
        # redis-py's return types are unions of bytes/str/awaitables: typed loosely here.
        self._redis: Any = redis
        self._ttl_s = ttl_s
        # A BLPOP must end before the client's own read timeout (redis-py's default is
        # 5 s), or the client gives up on the reply and the wait fails.
        socket_timeout = _read_timeout(redis)
        self._wake_s = min(wake_s, socket_timeout / 2) if socket_timeout else wake_s
        self.lease_s = lease_s
        self._publish = redis.register_script(scripts.PUBLISH)
        self._restart = redis.register_script(scripts.RESTART)
        self._claim = redis.register_script(scripts.CLAIM)
        self._renew = redis.register_script(scripts.RENEW)
        self._release = redis.register_script(scripts.RELEASE)
        self._lost = redis.register_script(scripts.LOST)
        self._close = redis.register_script(scripts.CLOSE)
        self._discard = redis.register_script(scripts.DISCARD)
        self._forget = redis.register_script(scripts.FORGET)

    # ------------------------------------------------------------ rollout side
    async def needs_run(self, job_id: str, step: int, group_id: str) -> bool:
        """False for a redelivered task whose group is final, or a step already closed."""
        keys = StepKeys(job_id, step)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.exists(keys.closed)
            pipe.hget(keys.status, group_id)
            closed, state = await pipe.execute()
        return not closed and (state is None or int(state) not in FINAL_STATES)

    async def claim(self, job_id: str, step: int, group_id: str, token: str) -> Claim:
        """Before a group runs: takes its lease for `token` (one per run) unless refused."""
        keys = StepKeys(job_id, step)
        reply = await self._claim(
            keys=[keys.closed, keys.status, keys.claims, keys.lease(group_id)],
            args=[group_id, token, _ms(self.lease_s), min(FINAL_STATES), self._ttl_s],
        )
        return Claim(_text(reply))

    async def renew(self, job_id: str, step: int, group_id: str, token: str) -> bool:
        """False when the lease is gone or another run's: the trainer may have re-dispatched
        the group (this run may still finish; its publish counts once)."""
        reply = await self._renew(
            keys=[StepKeys(job_id, step).lease(group_id)], args=[token, _ms(self.lease_s)]
        )
        return bool(reply)

    async def release(self, job_id: str, step: int, group_id: str, token: str) -> bool:
        """Gives a running group up (its worker is stopping): the trainer dispatches it again
        at its next wake instead of a lease later. False when the lease was not this run's."""
        reply = await self._release(keys=[StepKeys(job_id, step).lease(group_id)], args=[token])
        return bool(reply)

    async def publish(
        self,
        job_id: str,
        step: int,
        group_id: str,
        response: rollout_pb2.RunGroupResponse,
        token: str = "",
    ) -> Published:
        entry = to_batch_group(group_id, response)
        return await self.publish_entry(job_id, step, entry, token)

    async def publish_entry(
        self, job_id: str, step: int, entry: batch_pb2.BatchGroup, token: str = ""
    ) -> Published:
        """`token`: the claim's; the run's lease and claim are released with the publish."""
        keys = StepKeys(job_id, step)
        payload = entry.SerializeToString()
        reply = await self._publish(
            keys=[
                keys.groups,
                keys.status,
                keys.notify,
                keys.closed,
                keys.claims,
                keys.lease(entry.group_id),
            ],
            args=[entry.group_id, int(entry.state), payload, self._ttl_s, token],
        )
        return Published(_text(reply))

    # ------------------------------------------------------------ trainer side
    async def restart(self, job_id: str, step: int) -> set[str]:
        """Before a step is dispatched (again): forget non-final groups, return the kept ids."""
        keys = StepKeys(job_id, step)
        kept = await self._restart(
            keys=[keys.groups, keys.status, keys.claims],
            args=[keys.lease_prefix, min(FINAL_STATES)],
        )
        return {k.decode() for k in kept}

    async def forget(self, job_id: str, step: int, group_ids: Sequence[str]) -> int:
        """Drop answered groups (even final ones) so that they are dispatched and stored
        again: the trainer's rule for groups too stale to train on. 0 once closed."""
        if not group_ids:
            return 0
        keys = StepKeys(job_id, step)
        forgot = await self._forget(keys=[keys.groups, keys.status, keys.closed], args=group_ids)
        return int(forgot)

    async def lost(self, job_id: str, step: int) -> list[str]:
        """Groups whose worker died (claimed, unanswered, lease gone), each reported once."""
        keys = StepKeys(job_id, step)
        lost = await self._lost(keys=[keys.claims, keys.status], args=[keys.lease_prefix])
        return sorted(_text(k) for k in lost)

    async def progress(self, job_id: str, step: int, group_ids: Sequence[str]) -> StepProgress:
        raw = await self._redis.hgetall(StepKeys(job_id, step).status)
        return progress_of(raw, group_ids)

    async def wait(
        self,
        job_id: str,
        step: int,
        group_ids: Sequence[str],
        timeout_s: float,
        quorum: int,
        on_lost: OnLost | None = None,
    ) -> StepProgress:
        """Until every group answered, or `timeout_s` passed with `quorum` answered.

        `on_lost` (the trainer's re-dispatch) is called on each wake with the groups of
        `group_ids` whose worker died; it must dispatch them again (their claims are gone).
        """
        keys = StepKeys(job_id, step)
        wanted = set(group_ids)
        deadline = time.monotonic() + timeout_s
        while True:
            if on_lost is not None:
                lost = [g for g in await self.lost(job_id, step) if g in wanted]
                if lost:
                    await on_lost(lost)
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
        self,
        job_id: str,
        step: int,
        group_ids: Sequence[str],
        timeout_s: float,
        quorum: int,
        on_lost: OnLost | None = None,
    ) -> Gathered:
        start = time.monotonic()
        requeued = 0

        async def counted(lost: list[str]) -> None:
            nonlocal requeued
            requeued += len(lost)
            assert on_lost is not None
            await on_lost(lost)

        progress = await self.wait(
            job_id, step, group_ids, timeout_s, quorum, counted if on_lost else None
        )
        answered = sorted(progress.states)
        groups = await self.read(job_id, step, answered)
        counts = Counter(int(g.state) for g in groups)
        return Gathered(groups, len(set(group_ids)), time.monotonic() - start, counts, requeued)

    async def close(self, job_id: str, step: int) -> None:
        """After the step's checkpoint is saved: the batch goes, late publishes are refused."""
        keys = StepKeys(job_id, step)
        await self._close(
            keys=[keys.groups, keys.status, keys.notify, keys.closed, keys.claims],
            args=[keys.lease_prefix, self._ttl_s],
        )

    async def discard(self, job_id: str, step: int) -> None:
        """Before a resumed job (a FAILED or CANCELLED one) dispatches a step it had begun:
        its groups go, final ones too, as a fail_job verdict that failed the job would
        fail it again. A run still going from before may publish late; it counts once."""
        keys = StepKeys(job_id, step)
        await self._discard(
            keys=[keys.groups, keys.status, keys.notify, keys.claims], args=[keys.lease_prefix]
        )


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _text(reply: bytes | str) -> str:
    return reply.decode() if isinstance(reply, bytes) else reply
