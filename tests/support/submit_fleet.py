"""The trainer's servicer on a gRPC server of its own (`trainer_server`), and the submit
path on one gRPC server, for tests of what SubmitJob and `POST /train`
accept: the trainer's servicer (as the test builds it), the real rollout servicer (its
DescribeEnvironment loads environments; no group runs, so its runner is never started) and
the reward servicer; and the HTTP API in front of them, in process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from pydantic import SecretStr

from artfleet.runtime.config import ServerSettings
from artfleet.runtime.rpc.server import GrpcServer
from artfleet.runtime.service import free_port
from artfleet.v1 import reward_pb2_grpc, rollout_pb2_grpc, trainer_pb2_grpc
from artfleet_api.app import create_app
from artfleet_api.settings import ApiSettings
from artfleet_reward.servicer import RewardServicer
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.servicer import RolloutServicer
from artfleet_rollout.settings import RolloutSettings
from artfleet_trainer.servicer import TrainerServicer


def submit_target() -> str:
    return f"127.0.0.1:{free_port()}"


def trainer_server(servicer: TrainerServicer, token: str, name: str) -> GrpcServer:
    """The trainer's servicer alone on a free port (`server.port` once started)."""
    return GrpcServer(
        ServerSettings(api_token=SecretStr(token), port=0, metrics_port=0),
        name,
        [lambda s: trainer_pb2_grpc.add_TrainerServicer_to_server(servicer, s)],
        ["artfleet.v1.Trainer"],
    )


def submit_server(target: str, token: str, trainer: TrainerServicer, name: str) -> GrpcServer:
    """Trainer, Rollout and Reward on `target` (not started)."""
    settings = RolloutSettings(
        api_token=SecretStr(token), port=int(target.rsplit(":", 1)[1]), metrics_port=0
    )
    rollout = RolloutServicer(GroupRunner(settings))
    return GrpcServer(
        settings,
        name,
        [
            lambda s: trainer_pb2_grpc.add_TrainerServicer_to_server(trainer, s),
            lambda s: rollout_pb2_grpc.add_RolloutServicer_to_server(rollout, s),
            lambda s: reward_pb2_grpc.add_RewardServicer_to_server(RewardServicer(), s),
        ],
        ["artfleet.v1.Trainer", "artfleet.v1.Rollout", "artfleet.v1.Reward"],
    )


@asynccontextmanager
async def api_client(target: str, token: str, tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The HTTP API app (its lifespan run) over the services at `target`, as a client."""
    settings = ApiSettings(
        api_token=SecretStr(token),
        redis_url=f"redis://127.0.0.1:{free_port()}/0",
        trainer_target=target,
        reward_target=target,
        rollout_target=target,
        sandbox_target="127.0.0.1:1",
        trajectories_dir=str(tmp_path / "logs"),
        rpc_timeout_s=30.0,
    )
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://api",
            headers={"Authorization": f"Bearer {token}"},
        ) as client,
    ):
        yield client
