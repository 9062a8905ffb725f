"""The Celery side: take a group task from the `rollout` queue, run it, publish the result.

Publishing is idempotent by group id (HSETNX): a task redelivered after a worker died
(acks_late) does not replace a group the trainer may already have gathered.
"""

from __future__ import annotations

import asyncio
import logging

import redis
from celery import Celery

from artfleet.queue import BATCH_TTL_S, RUN_GROUP_TASK, batch_key, decode_payload, make_celery
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_rollout import metrics
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.settings import RolloutSettings

log = logging.getLogger(__name__)


def failed_group(task: rollout_pb2.GroupTask, exc: BaseException) -> rollout_pb2.RunGroupResponse:
    """A group that could not run still answers, so the trainer need not wait for a deadline."""
    group = pb.TrajectoryGroup(
        exceptions=[pb.RolloutException(type=type(exc).__name__, message=str(exc))]
    )
    group.metadata["group_id"].string_value = task.group_id
    return rollout_pb2.RunGroupResponse(group=group)


def is_scored(raw: bytes | None) -> bool:
    return raw is not None and bool(rollout_pb2.RunGroupResponse.FromString(raw).group.trajectories)


def publish(
    store: redis.Redis, key: str, group_id: str, response: rollout_pb2.RunGroupResponse
) -> None:
    """A scored group replaces a failure; a failure never replaces anything."""
    if response.group.trajectories:
        store.hset(key, group_id, response.SerializeToString())
        metrics.GROUPS.labels("ok").inc()
    else:
        store.hsetnx(key, group_id, response.SerializeToString())
        metrics.GROUPS.labels("failed").inc()
    store.expire(key, BATCH_TTL_S)


def create_worker_app(settings: RolloutSettings) -> Celery:
    app = make_celery(settings.redis_url, name="artfleet-rollout")
    runner = GroupRunner(settings)
    store = redis.Redis.from_url(settings.redis_url)

    @app.task(name=RUN_GROUP_TASK)
    def run_group(payload: str) -> None:
        task = rollout_pb2.GroupTask.FromString(decode_payload(payload))
        key = batch_key(task.job_id, task.step)
        if is_scored(store.hget(key, task.group_id)):  # type: ignore[arg-type]
            log.info("group %s already published; skipping", task.group_id)
            return
        try:
            response = asyncio.run(runner.run(task))
        except Exception as exc:
            log.exception("group %s failed", task.group_id)
            response = failed_group(task, exc)
        publish(store, key, task.group_id, response)

    return app
