"""The rollout side as the trainer sees it: describe environments and enqueue groups (the
groups come back through the step-batch contract, `artfleet.contracts.batches`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

import grpc
from celery import Celery

from artfleet.contracts.errors import InvalidArgument, Unavailable
from artfleet.contracts.queue import ROLLOUT_QUEUE, RUN_GROUP_TASK, encode_payload
from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc

log = logging.getLogger(__name__)


class RolloutClient:
    """Asks a rollout replica which scenarios an environment split has."""

    def __init__(self, target: str, token: str) -> None:
        self._target = target
        self._token = token

    async def describe(
        self, environment: str, *, probe_evaluate: bool = False, mcp_config: str = ""
    ) -> rollout_pb2.EnvironmentInfo:
        """With `probe_evaluate`, an MCP environment's server (the job's `mcp_config`, JSON,
        where it gives one) is started and must have its evaluate tool; what is wrong is an
        InvalidArgument on `reward`, the scorer that needs it."""
        request = rollout_pb2.DescribeEnvironmentRequest(
            name=environment, probe_evaluate=probe_evaluate, mcp_config=mcp_config
        )
        async with aio_channel(self._target, self._token) as channel:
            stub = rollout_pb2_grpc.RolloutStub(channel)
            try:
                # A probe starts a server (a container, maybe): give it longer.
                return await stub.DescribeEnvironment(
                    request, timeout=120 if probe_evaluate else 30
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                    raise InvalidArgument(exc.details() or "unknown", "environment") from None
                if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    raise InvalidArgument(exc.details() or "", "reward") from None
                raise Unavailable(f"rollout service {self._target}: {exc.details()}") from None

    async def scenario_ids(self, environment: str, split: str) -> list[str]:
        return split_ids(await self.describe(environment), environment, split)

    async def check_policy(self, base_url: str, policy: str) -> str | None:
        """None when `base_url` serves `policy` as the rollout workers reach it; else why
        not. Unavailable when no rollout replica answers."""
        request = rollout_pb2.CheckPolicyRequest(model_base_url=base_url, policy=policy)
        async with aio_channel(self._target, self._token) as channel:
            try:
                # The replica's own probe may take its full minute on a loading server.
                answer = await rollout_pb2_grpc.RolloutStub(channel).CheckPolicy(
                    request, timeout=90
                )
            except grpc.aio.AioRpcError as exc:
                raise Unavailable(f"rollout service {self._target}: {exc.details()}") from None
        return None if answer.served else (answer.error or "not served")


def split_ids(info: rollout_pb2.EnvironmentInfo, environment: str, split: str) -> list[str]:
    """The scenario ids of `split`, else InvalidArgument on `split` naming the splits."""
    ids = [s.id for s in info.scenarios if s.split == split]
    if not ids:
        known = sorted(info.split_sizes)
        raise InvalidArgument(
            f"environment {environment!r} has no split {split!r} (splits: {', '.join(known)})",
            "split",
        )
    return ids


class ScenarioSource(Protocol):
    """Which scenarios an environment split has (RolloutClient asks a rollout replica)."""

    async def scenario_ids(self, environment: str, split: str) -> list[str]: ...


class Dispatcher(Protocol):
    """Hands a step's group tasks to rollout workers, which publish the groups through
    `artfleet.contracts.batches`; returns how many were sent."""

    async def enqueue(self, tasks: Sequence[rollout_pb2.GroupTask], skip: set[str]) -> int: ...


class GroupDispatcher:
    """One Celery task per group on the `rollout` queue."""

    def __init__(self, celery: Celery) -> None:
        self._celery = celery

    async def enqueue(self, tasks: Sequence[rollout_pb2.GroupTask], skip: set[str]) -> int:
        sent = 0
        for task in tasks:
            if task.group_id in skip:  # already final before a trainer restart
                continue
            payload = encode_payload(task.SerializeToString())
            await asyncio.to_thread(
                self._celery.send_task, RUN_GROUP_TASK, args=[payload], queue=ROLLOUT_QUEUE
            )
            sent += 1
        return sent
