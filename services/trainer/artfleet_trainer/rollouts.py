"""The rollout side as the trainer sees it: describe environments, enqueue and gather groups."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
from celery import Celery

from artfleet.errors import InvalidArgument, Unavailable
from artfleet.queue import ROLLOUT_QUEUE, RUN_GROUP_TASK, encode_payload
from artfleet.rpc.client import aio_channel
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc
from artfleet_trainer.store import JobStore

log = logging.getLogger(__name__)


class RolloutClient:
    """Asks a rollout replica which scenarios an environment split has."""

    def __init__(self, target: str, token: str) -> None:
        self._target = target
        self._token = token

    async def scenario_ids(self, environment: str, split: str) -> list[str]:
        async with aio_channel(self._target, self._token) as channel:
            stub = rollout_pb2_grpc.RolloutStub(channel)
            try:
                info = await stub.DescribeEnvironment(
                    rollout_pb2.DescribeEnvironmentRequest(name=environment), timeout=30
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                    raise InvalidArgument(exc.details() or "unknown", "environment") from None
                raise Unavailable(f"rollout service {self._target}: {exc.details()}") from None
        ids = [s.id for s in info.scenarios if s.split == split]
        if not ids:
            known = sorted(info.split_sizes)
            raise InvalidArgument(
                f"environment {environment!r} has no split {split!r} (splits: {', '.join(known)})",
                "split",
            )
        return ids


@dataclass
class GatherResult:
    responses: list[rollout_pb2.RunGroupResponse]
    expected: int
    waited_s: float


class GroupDispatcher:
    """Enqueues one Celery task per group and gathers the scored groups from Redis."""

    def __init__(self, celery: Celery, store: JobStore, poll_interval_s: float) -> None:
        self._celery = celery
        self._store = store
        self._poll = poll_interval_s

    async def enqueue(self, tasks: Sequence[rollout_pb2.GroupTask], skip: set[str]) -> int:
        sent = 0
        for task in tasks:
            if task.group_id in skip:  # already scored before a trainer restart
                continue
            payload = encode_payload(task.SerializeToString())
            await asyncio.to_thread(
                self._celery.send_task, RUN_GROUP_TASK, args=[payload], queue=ROLLOUT_QUEUE
            )
            sent += 1
        return sent

    async def gather(
        self, job_id: str, step: int, group_ids: Sequence[str], timeout_s: float, quorum: int
    ) -> GatherResult:
        """Waits for every group, or after `timeout_s` takes what came if it meets `quorum`."""
        start = time.monotonic()
        wanted = set(group_ids)
        while True:
            batch = {
                k: v for k, v in (await self._store.batch(job_id, step)).items() if k in wanted
            }
            waited = time.monotonic() - start
            if len(batch) == len(wanted) or (waited >= timeout_s and len(batch) >= quorum):
                return GatherResult(list(batch.values()), len(wanted), waited)
            if waited >= timeout_s:
                raise TimeoutError(
                    f"step {step}: {len(batch)}/{len(wanted)} groups after {timeout_s:.0f}s "
                    f"(quorum {quorum}): are rollout workers running?"
                )
            await asyncio.sleep(self._poll)
