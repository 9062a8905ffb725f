"""A real rollout Celery worker process for tests: our worker code as artfleet_rollout.app
runs it (create_worker_app, a threads pool, GroupWorker and StepBatches on one LoopThread)
around a test GroupRunner whose groups block until the test releases them.

    python blocking_rollout_worker.py REDIS_URL NAME LEASE_S [SHUTDOWN_GRACE_S]

What it records in REDIS_URL's database (the test reads and writes these):
    test:ready:<name>  string  set once the Celery worker consumes the rollout queue
    test:started       list    "<name> <group id> <unix time>" when a group starts running
    test:published     list    "<name> <group id> <stored|kept|closed|skipped>"
    test:release       string  set by the test: every blocked group finishes (scored)
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import redis
import redis.asyncio as aioredis
from celery.signals import worker_ready
from trainer_fakes import scored

from artfleet.contracts.batches import StepBatches
from artfleet.contracts.queue import ROLLOUT_QUEUE
from artfleet.v1 import rollout_pb2
from artfleet_rollout.app import LoopThread, bound_warm_shutdown
from artfleet_rollout.worker import GroupWorker, create_worker_app


class BlockingRunner:
    """The GroupRunner interface: a group runs until the test sets `test:release`."""

    def __init__(self, client: aioredis.Redis, name: str) -> None:
        self._redis = client
        self._name = name

    async def run(self, task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        await self._redis.rpush("test:started", f"{self._name} {task.group_id} {time.time()}")
        # Another process releases it: a Redis key polled, not an asyncio.Event.
        while not await self._redis.exists("test:release"):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return scored(task)


async def _client(url: str) -> aioredis.Redis:
    return aioredis.from_url(url)


def main() -> None:
    url, name, lease_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    grace_s = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
    logging.basicConfig(level=logging.INFO, format=f"{name} %(levelname)s %(name)s %(message)s")
    loop = LoopThread(f"{name}-loop")
    loop.start()
    client = loop.call(_client(url), timeout=60)
    worker = GroupWorker(BlockingRunner(client, name), StepBatches(client, lease_s=lease_s), name)
    sync = redis.Redis.from_url(url)
    bound_warm_shutdown(loop, worker, grace_s)  # as artfleet_rollout.app does

    def submit(task: rollout_pb2.GroupTask) -> None:
        published = loop.call(worker.handle(task))
        outcome = published.value if published is not None else "skipped"
        sync.rpush("test:published", f"{name} {task.group_id} {outcome}")

    @worker_ready.connect
    def ready(**_: object) -> None:
        sync.set(f"test:ready:{name}", b"1")

    app = create_worker_app(url, submit)
    app.Worker(
        hostname=f"{name}@test",
        queues=[ROLLOUT_QUEUE],
        pool="threads",
        concurrency=2,
        loglevel="INFO",
        without_mingle=True,
        without_gossip=True,
    ).start()


if __name__ == "__main__":
    main()
