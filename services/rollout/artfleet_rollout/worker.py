"""The Celery side: take a group task from the `rollout` queue, run it, publish the result.

Groups run on the process's one event loop (see app.py): a Celery task thread only hands
the task over and waits. Publishing follows the step-batch contract (`artfleet.contracts.batches`):
a group is claimed before it runs (a redelivered task (acks_late) whose group is final, or
held by a live run, is skipped), its lease is renewed every lease/3 while it runs (so the
trainer sees within a lease that a worker died and dispatches its groups again), and a
failure never replaces a scored group.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import redis.exceptions
from celery import Celery

from artfleet.contracts.batches import Claim, Published, StepBatches, classify
from artfleet.contracts.queue import RUN_GROUP_TASK, decode_payload, make_celery
from artfleet.runtime.logs import request_id
from artfleet.runtime.tasks import cancel_and_wait
from artfleet.v1 import batch_pb2, rollout_pb2
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout import failures, metrics

log = logging.getLogger(__name__)
T = TypeVar("T")
REDIS_RETRY_S = 120.0


class Runner(Protocol):
    """What the worker needs of a GroupRunner."""

    async def run(self, task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse: ...


def failed_group(task: rollout_pb2.GroupTask, exc: BaseException) -> rollout_pb2.RunGroupResponse:
    """A group that could not run still answers, so the trainer need not wait for a deadline;
    its failure stands for each of its episodes."""
    failure = failures.logged(task, exc, "group", episodes=max(task.rollouts, 1))
    group = pb.TrajectoryGroup(exceptions=[failure])
    group.metadata["group_id"].string_value = task.group_id
    return rollout_pb2.RunGroupResponse(group=group)


def outcome_label(state: batch_pb2.GroupState) -> str:
    return batch_pb2.GroupState.Name(state).removeprefix("GROUP_STATE_").lower()


async def redis_retry(
    call: Callable[[], Awaitable[T]], give_up_s: float = REDIS_RETRY_S, pause_s: float = 0.5
) -> T:
    """`call` again while Redis is unreachable (a restart), up to `give_up_s`. Found by the
    chaos suite: a claim that met a restarting Redis failed the Celery task, which was
    acked, so a group nobody had claimed was lost (no claim: no lease to run out)."""
    deadline = time.monotonic() + give_up_s
    while True:
        try:
            return await call()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            if time.monotonic() > deadline:
                raise
            metrics.FAILURES.labels("redis_unavailable").inc()
            log.warning("redis unavailable (%s); trying again", exc)
        await asyncio.sleep(pause_s)
        pause_s = min(pause_s * 2, 5.0)


class GroupWorker:
    """Runs one group task end to end on the caller's event loop: claim, run, publish."""

    def __init__(self, runner: Runner, batches: StepBatches, worker_id: str = "") -> None:
        self._runner = runner
        self._batches = batches
        self._worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self._running: set[asyncio.Task[Any]] = set()

    async def handle(self, task: rollout_pb2.GroupTask) -> Published | None:
        """None when the group needs no run (final already, held by a live run elsewhere,
        or its step is over)."""
        # One id per run: the claim's token and the request id of the run's log lines
        # (a failed episode's record names it, so the trainer's error leads to them).
        run_id = uuid.uuid4().hex[:12]
        token = f"{self._worker_id}:{run_id}"
        request_id.set(run_id)
        claim = await redis_retry(
            lambda: self._batches.claim(task.job_id, task.step, task.group_id, token)
        )
        if claim is not Claim.CLAIMED:
            log.info("group %s: %s; skipping", task.group_id, claim.value)
            return None
        heartbeat = asyncio.create_task(self._heartbeat(task, token))
        running = asyncio.current_task()
        if running is not None:
            self._running.add(running)
        try:
            response = await self._runner.run(task)
        except asyncio.CancelledError:
            # abandon(): the worker is stopping. Give the group back now, not a lease later.
            await asyncio.shield(self._release(task, token))
            raise
        except Exception as exc:
            response = failed_group(task, exc)  # logged there, with its traceback
        finally:
            self._running.discard(running)
            await cancel_and_wait(heartbeat)
        published = await redis_retry(
            lambda: self._batches.publish(task.job_id, task.step, task.group_id, response, token)
        )
        metrics.GROUPS.labels(outcome_label(classify(response))).inc()
        if published is not Published.STORED:
            log.info("group %s: %s (not stored)", task.group_id, published.value)
        return published

    async def abandon(self) -> int:
        """Cancels the groups still running (a shutdown past its grace); each gives its
        lease back, so the trainer dispatches it again at once. Returns how many."""
        running = list(self._running)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        return len(running)

    async def _release(self, task: rollout_pb2.GroupTask, token: str) -> None:
        try:
            await self._batches.release(task.job_id, task.step, task.group_id, token)
            log.warning("group %s given back: the worker is stopping", task.group_id)
        except Exception:  # the lease then runs out by itself: the same outcome, later
            log.warning("group %s: could not give the lease back", task.group_id, exc_info=True)

    async def _heartbeat(self, task: rollout_pb2.GroupTask, token: str) -> None:
        """Renews the group's lease every lease/3 until the run ends; a Redis error is
        retried on the next beat (the lease outlives two missed beats)."""
        while True:
            await asyncio.sleep(self._batches.lease_s / 3)
            try:
                renewed = await self._batches.renew(task.job_id, task.step, task.group_id, token)
            except Exception:
                log.warning("group %s: lease renewal failed", task.group_id, exc_info=True)
                continue
            if not renewed:
                # Presumed dead (the lease ran out): the group was dispatched again. This
                # run goes on; whichever publish comes first counts, once.
                log.warning("group %s: lease lost; the group runs again elsewhere", task.group_id)
                return


def create_worker_app(redis_url: str, submit: Callable[[rollout_pb2.GroupTask], object]) -> Celery:
    """`submit` runs the task on the process's event loop and returns once it is published."""
    app = make_celery(redis_url, name="artfleet-rollout")

    @app.task(name=RUN_GROUP_TASK)
    def run_group(payload: str) -> None:
        submit(rollout_pb2.GroupTask.FromString(decode_payload(payload)))

    return app
