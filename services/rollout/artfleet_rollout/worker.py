"""The Celery side: take a group task from the `rollout` queue, run it, publish the result.

Groups run on the process's one event loop (see app.py): a Celery task thread only hands
the task over and waits. Publishing follows the step-batch contract (`artfleet.batches`):
a redelivered task (acks_late) whose group is already final is skipped, and a failure
never replaces a scored group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from celery import Celery

from artfleet.batches import Published, StepBatches, classify
from artfleet.queue import RUN_GROUP_TASK, decode_payload, make_celery
from artfleet.v1 import batch_pb2, rollout_pb2
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout import metrics

log = logging.getLogger(__name__)


class Runner(Protocol):
    """What the worker needs of a GroupRunner."""

    async def run(self, task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse: ...


def failed_group(task: rollout_pb2.GroupTask, exc: BaseException) -> rollout_pb2.RunGroupResponse:
    """A group that could not run still answers, so the trainer need not wait for a deadline."""
    group = pb.TrajectoryGroup(
        exceptions=[pb.RolloutException(type=type(exc).__name__, message=str(exc))]
    )
    group.metadata["group_id"].string_value = task.group_id
    return rollout_pb2.RunGroupResponse(group=group)


def outcome_label(state: batch_pb2.GroupState) -> str:
    return batch_pb2.GroupState.Name(state).removeprefix("GROUP_STATE_").lower()


class GroupWorker:
    """Runs one group task end to end on the caller's event loop: skip, run, publish."""

    def __init__(self, runner: Runner, batches: StepBatches) -> None:
        self._runner = runner
        self._batches = batches

    async def handle(self, task: rollout_pb2.GroupTask) -> Published | None:
        """None when the group needs no run (final already, or its step is over)."""
        if not await self._batches.needs_run(task.job_id, task.step, task.group_id):
            log.info("group %s already final or its step closed; skipping", task.group_id)
            return None
        try:
            response = await self._runner.run(task)
        except Exception as exc:
            log.exception("group %s failed", task.group_id)
            response = failed_group(task, exc)
        published = await self._batches.publish(task.job_id, task.step, task.group_id, response)
        metrics.GROUPS.labels(outcome_label(classify(response))).inc()
        if published is not Published.STORED:
            log.info("group %s: %s (not stored)", task.group_id, published.value)
        return published


def create_worker_app(redis_url: str, submit: Callable[[rollout_pb2.GroupTask], object]) -> Celery:
    """`submit` runs the task on the process's event loop and returns once it is published."""
    app = make_celery(redis_url, name="artfleet-rollout")

    @app.task(name=RUN_GROUP_TASK)
    def run_group(payload: str) -> None:
        submit(rollout_pb2.GroupTask.FromString(decode_payload(payload)))

    return app
