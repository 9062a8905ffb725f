"""The API's gRPC channels (trainer, rollout, reward, sandbox) and Redis, as one lifecycle
object. Channels connect lazily, so the API starts while the trainer is still down. The
policy endpoint (the inference service) is HTTP: `/health` asks it as its clients do."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import grpc
import redis.asyncio as aioredis
from grpc_health.v1 import health_pb2, health_pb2_grpc

from artfleet.runtime.health import probe_policy
from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import reward_pb2_grpc, rollout_pb2_grpc, tinker_api_pb2_grpc, trainer_pb2_grpc
from artfleet_api.settings import ApiSettings

DEPENDENCIES = ("trainer", "rollout", "reward", "sandbox", "redis", "inference")


@dataclass
class DependencyState:
    ok: bool
    detail: str


@dataclass
class Backends:
    settings: ApiSettings
    channels: dict[str, grpc.aio.Channel] = field(default_factory=dict)
    redis: aioredis.Redis | None = None

    async def start(self) -> None:
        token = self.settings.api_token.get_secret_value()
        targets = {
            "trainer": self.settings.trainer_target,
            "rollout": self.settings.rollout_target,
            "reward": self.settings.reward_target,
            "sandbox": self.settings.sandbox_target,
        }
        self.channels = {name: aio_channel(target, token) for name, target in targets.items()}
        self.redis = aioredis.Redis.from_url(self.settings.redis_url)

    async def stop(self) -> None:
        for channel in self.channels.values():
            await channel.close()
        self.channels.clear()
        if self.redis is not None:
            await self.redis.aclose()
            self.redis = None

    @property
    def trainer(self) -> trainer_pb2_grpc.TrainerStub:
        return trainer_pb2_grpc.TrainerStub(self.channels["trainer"])

    @property
    def tinker_api(self) -> tinker_api_pb2_grpc.TinkerApiStub:
        """The Tinker-compatible API's calls, on the trainer's channel."""
        return tinker_api_pb2_grpc.TinkerApiStub(self.channels["trainer"])

    @property
    def rollout(self) -> rollout_pb2_grpc.RolloutStub:
        return rollout_pb2_grpc.RolloutStub(self.channels["rollout"])

    @property
    def reward(self) -> reward_pb2_grpc.RewardStub:
        return reward_pb2_grpc.RewardStub(self.channels["reward"])

    async def health(self) -> dict[str, DependencyState]:
        names = [n for n in DEPENDENCIES if n not in ("redis", "inference")]
        checks = [self._grpc_health(n) for n in names]
        results = await asyncio.gather(*checks, self._redis_health(), self._policy_health())
        return dict(zip([*names, "redis", "inference"], results, strict=True))

    async def _policy_health(self) -> DependencyState:
        """The policy endpoint (`policy_base_url`: the inference service, or the trainer's
        own server) lists its models to the fleet token: what a rollout worker needs."""
        ok, detail = await asyncio.to_thread(
            probe_policy,
            self.settings.policy_base_url,
            self.settings.api_token.get_secret_value(),
            self.settings.health_timeout_s,
        )
        return DependencyState(ok, detail)

    async def _grpc_health(self, name: str) -> DependencyState:
        stub = health_pb2_grpc.HealthStub(self.channels[name])
        try:
            reply = await stub.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=self.settings.health_timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            return DependencyState(False, f"{exc.code().name}: {exc.details()}")
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return DependencyState(reply.status == health_pb2.HealthCheckResponse.SERVING, status)

    async def _redis_health(self) -> DependencyState:
        assert self.redis is not None
        try:
            await asyncio.wait_for(self.redis.ping(), self.settings.health_timeout_s)
        except Exception as exc:  # any failure of the ping is "down", with its reason
            return DependencyState(False, f"{type(exc).__name__}: {exc}")
        return DependencyState(True, "PONG")
