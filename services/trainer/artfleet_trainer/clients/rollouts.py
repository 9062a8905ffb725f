"""The rollout side as the trainer sees it: describe environments and enqueue groups (the
groups come back through the step-batch contract, `artfleet.contracts.batches`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import grpc
from celery import Celery

from artfleet.clients.replicas import ReplicaChoice, Resolved, resolve_replicas
from artfleet.contracts.errors import InvalidArgument, Unavailable
from artfleet.contracts.queue import ROLLOUT_QUEUE, RUN_GROUP_TASK, encode_payload
from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc

log = logging.getLogger(__name__)


# Codes after which another rollout replica may well answer where this one did not.
_TRY_ELSEWHERE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
_CONNECT_S = 3.0  # a replica cut off from the network answers nothing: not waiting longer
T = TypeVar("T")


class RolloutClient:
    """Asks the rollout replicas which scenarios an environment split has and whether the
    policy is served as they reach it. The target names every replica (a name resolving to
    several addresses, as `docker compose up --scale rollout=N` gives, or a comma list,
    `artfleet.clients.replicas`); each call goes to one that connects within a few
    seconds, and on to the next when it is unreachable, so one worker cut off from the
    network does not make the step wait for it."""

    def __init__(
        self, target: str, token: str, *, refresh_s: float = 10.0, connect_s: float = _CONNECT_S
    ) -> None:
        self._target = target
        self._token = token
        self._connect_s = connect_s
        self._resolved = Resolved(lambda: resolve_replicas(target), refresh_s)
        self._choice = ReplicaChoice(avoid_s=refresh_s)

    async def describe(
        self, environment: str, *, probe_evaluate: bool = False, mcp_config: str = ""
    ) -> rollout_pb2.EnvironmentInfo:
        """With `probe_evaluate`, an MCP environment's server (the job's `mcp_config`, JSON,
        where it gives one) is started and must have its evaluate tool; what is wrong is an
        InvalidArgument on `reward`, the scorer that needs it."""
        request = rollout_pb2.DescribeEnvironmentRequest(
            name=environment, probe_evaluate=probe_evaluate, mcp_config=mcp_config
        )
        try:
            # A probe starts a server (a container, maybe): give it longer.
            return await self._call(
                lambda stub: stub.DescribeEnvironment(
                    request, timeout=120 if probe_evaluate else 30
                )
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
        try:
            # The replica's own probe may take its full minute on a loading server.
            answer = await self._call(lambda stub: stub.CheckPolicy(request, timeout=90))
        except grpc.aio.AioRpcError as exc:
            raise Unavailable(f"rollout service {self._target}: {exc.details()}") from None
        return None if answer.served else (answer.error or "not served")

    async def _call(self, call: Callable[[rollout_pb2_grpc.RolloutStub], Awaitable[T]]) -> T:
        """`call` on the first replica that connects and answers; the last error (or
        Unavailable) when none does."""
        self._choice.update(await self._resolved.get() or [self._target])
        tried: set[str] = set()
        why = "no replica"
        while (address := self._choice.pick(exclude=tried)) is not None:
            tried.add(address)
            async with aio_channel(address, self._token) as channel:
                unreachable = await not_connected(channel, self._connect_s)
                if unreachable:
                    why = f"{address} {unreachable}"
                    self._failed(address, why)
                    continue
                try:
                    return await call(rollout_pb2_grpc.RolloutStub(channel))
                except grpc.aio.AioRpcError as exc:
                    if exc.code() not in _TRY_ELSEWHERE or len(tried) == len(self._choice.replicas):
                        raise
                    why = f"{address}: {exc.code().name}: {exc.details()}"
                    self._failed(address, why)
        raise Unavailable(f"rollout service {self._target}: {why}")

    def _failed(self, address: str, why: str) -> None:
        self._choice.failed(address)
        self._resolved.stale()  # the replica set may have changed
        log.warning("rollout replica %s; trying another", why)


async def not_connected(channel: grpc.aio.Channel, within_s: float) -> str:
    """ "" when `channel` is READY within `within_s`, else why not: at once when it fails to
    connect (refused), after `within_s` when the connection hangs (a host cut off)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    state = channel.get_state(try_to_connect=True)
    failed = (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN)
    while state != grpc.ChannelConnectivity.READY:
        if state in failed:
            return "refused the connection"
        remaining = deadline - loop.time()
        try:
            if remaining <= 0:
                raise TimeoutError
            await asyncio.wait_for(channel.wait_for_state_change(state), remaining)
        except TimeoutError:
            return f"did not connect within {within_s:g}s"
        state = channel.get_state(try_to_connect=True)
    return ""


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
