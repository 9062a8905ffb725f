"""The trainer process: Redis job store, ART backend, job runner and the gRPC API."""

from __future__ import annotations

import logging

import redis.asyncio as aioredis

from artfleet.contracts.batches import StepBatches
from artfleet.contracts.queue import make_celery
from artfleet.runtime.health import HealthMonitor
from artfleet.runtime.rpc.server import GrpcServer
from artfleet.v1 import tinker_api_pb2_grpc, trainer_pb2_grpc
from artfleet_trainer.backends import backend_unavailable_reason, make_backend
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import GroupDispatcher, RolloutClient
from artfleet_trainer.jobs.context_limit import ContextLimits
from artfleet_trainer.jobs.images import ImageChecker
from artfleet_trainer.jobs.runner import JobRunner
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer
from artfleet_trainer.settings import TrainerSettings
from artfleet_trainer.tinker_api.service import TinkerApiService

log = logging.getLogger(__name__)


def tinker_api_service(settings: TrainerSettings, backend: object) -> TinkerApiService | None:
    """The Tinker-compatible API's service, on the torch backend unless turned off."""
    from artfleet_trainer.torch_backend import TorchBackend  # the backend that has clients

    if not isinstance(backend, TorchBackend) or settings.tinker_api_max_clients == 0:
        return None
    return TinkerApiService.on(settings, backend)


def running_jobs_limit(settings: TrainerSettings, backend: object) -> int:
    """Jobs side by side: the setting, else the torch backend's default for its device;
    ART's own backends train one model at a time."""
    default = getattr(backend, "running_jobs_default", None)
    if default is None:
        return 1
    return settings.max_running_jobs or int(default())


class TrainerApp:
    def __init__(self, settings: TrainerSettings) -> None:
        self.settings = settings
        token = settings.api_token.get_secret_value()
        self._redis = aioredis.from_url(settings.redis_url)
        self.store = JobStore(self._redis)
        self.backend = make_backend(settings.backend, settings)
        rollout = RolloutClient(settings.rollout_target, token)
        dispatcher = GroupDispatcher(make_celery(settings.redis_url))
        self.runner = JobRunner(
            settings,
            self.store,
            self.backend,
            dispatcher,
            rollout,
            StepBatches(self._redis),
            policy_probe=rollout,
            max_running=running_jobs_limit(settings, self.backend),
        )
        log.info("up to %d jobs run side by side", self.runner.max_running)
        servicer = TrainerServicer(
            self.store,
            rollout,
            RewardClient(settings.reward_target, token),
            lambda kind: backend_unavailable_reason(kind, settings.backend),
            art_path=settings.art_path,
            images=ImageChecker(rollout, settings.sandbox_target, token),
            backend=settings.backend,
            base_model_map=settings.base_model_map,
            retire=getattr(self.backend, "retire_steps", None),  # torch + vLLM
            context_limits=ContextLimits.for_settings(settings),
        )
        # Checkpoints and sampled trajectories fill these (kept on purpose, so never "stale");
        # findings never stop training.
        self.health = HealthMonitor.for_service(
            "trainer", settings, store_dirs=[settings.art_path, settings.trajectory_log_dir]
        )
        registrations = [
            lambda server: trainer_pb2_grpc.add_TrainerServicer_to_server(servicer, server)
        ]
        names = ["artfleet.v1.Trainer"]
        self.tinker_api = tinker_api_service(settings, self.backend)
        if self.tinker_api is not None:
            api = self.tinker_api
            registrations.append(
                lambda server: tinker_api_pb2_grpc.add_TinkerApiServicer_to_server(api, server)
            )
            names.append("artfleet.v1.TinkerApi")
        self.server = GrpcServer(settings, "trainer", registrations, names)

    async def start(self) -> None:
        await self._redis.ping()  # fail fast with a clear error when Redis is not there
        await self.server.start()
        serve = getattr(self.backend, "start_serving", None)  # torch: evals need no job
        if serve is not None:
            await serve()
        self.runner.start()
        if self.tinker_api is not None:
            self.tinker_api.start()
        self.health.start()
        await self.server.set_serving(True)

    async def stop(self) -> None:
        grace = self.settings.shutdown_grace_s
        await self.server.set_serving(False)
        await self.health.stop()
        await self.runner.stop(grace)
        if self.tinker_api is not None:
            await self.tinker_api.stop()
        await self.server.stop(grace)
        await self.backend.close()
        await self._redis.aclose()
        if getattr(self.backend, "group_broken", False):
            raise SystemExit("the trainer's ranks broke: torchrun restarts the group")
