"""Rollout gRPC API: describe environments, run one group synchronously, check a policy
endpoint, list the plugins this replica runs.

The servicer is given a started GroupRunner; the server shares the runner's event loop,
so a RunGroup call reuses the runner's connections like any Celery-submitted group."""

from __future__ import annotations

import grpc

from artfleet.contracts.errors import FailedPrecondition, InvalidArgument, NotFound
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc
from artfleet_rollout.agents.mcp_env import (
    McpEndpoint,
    McpFailure,
    probe_evaluate,
    with_job_server,
)
from artfleet_rollout.environments import (
    BrokenEnvironment,
    Environment,
    UnknownEnvironment,
    get_environment,
)
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.installed import installed_plugins


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
        except BrokenEnvironment as exc:
            raise InvalidArgument(str(exc), "name") from None
        if request.probe_evaluate:
            await self._probe_evaluate(env, request.mcp_config)
        return env.describe()

    async def _probe_evaluate(self, env: Environment, mcp_config: str) -> None:
        """Starts the server the job's episodes will start: the job's `mcp_config` (JSON)
        where it gives one, else the first scenario's."""
        task = next((s.mcp for s in env.scenarios() if s.mcp is not None), None)
        if task is None:
            return  # not an MCP environment: nothing to start
        settings = self._runner.settings
        endpoint = McpEndpoint(
            settings.sandbox_target, settings.api_token.get_secret_value(), settings.mcp_timeout_s
        )
        try:
            await probe_evaluate(with_job_server(task, mcp_config), endpoint)
        except McpFailure as exc:
            raise FailedPrecondition(f"environment {env.name!r}: {exc}") from None

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

    async def ListPlugins(
        self, request: rollout_pb2.ListPluginsRequest, context: grpc.aio.ServicerContext
    ) -> rollout_pb2.ListPluginsResponse:
        return rollout_pb2.ListPluginsResponse(plugins=installed_plugins())
