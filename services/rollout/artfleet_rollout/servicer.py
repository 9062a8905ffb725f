"""Rollout gRPC API: describe environments, run one group synchronously, check a policy
endpoint.

The servicer is given a started GroupRunner; the server shares the runner's event loop,
so a RunGroup call reuses the runner's connections like any Celery-submitted group."""

from __future__ import annotations

import grpc

from artfleet.errors import InvalidArgument, NotFound
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc
from artfleet_rollout.environments import UnknownEnvironment, get_environment
from artfleet_rollout.group import GroupRunner


class RolloutServicer(rollout_pb2_grpc.RolloutServicer):
    def __init__(self, runner: GroupRunner) -> None:
        self._runner = runner

    async def DescribeEnvironment(
        self, request: rollout_pb2.DescribeEnvironmentRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.EnvironmentInfo:
        if not request.name:
            raise InvalidArgument("is required", "name")
        try:
            env = get_environment(request.name)
        except UnknownEnvironment as exc:
            raise NotFound(str(exc)) from None
        return env.describe()

    async def RunGroup(
        self, request: rollout_pb2.RunGroupRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.RunGroupResponse:
        if not request.HasField("task"):
            raise InvalidArgument("is required", "task")
        return await self._runner.run(request.task)

    async def CheckPolicy(
        self, request: rollout_pb2.CheckPolicyRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.CheckPolicyResponse:
        return await self._runner.check_policy(request)
