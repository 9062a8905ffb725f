"""SubmitJob asks the sandbox whether a job's per-task images exist: a job naming an image
the Docker engine lacks is refused (FAILED_PRECONDITION, with the list); one whose images
exist is queued; the local backend, which runs no images, refuses them all.

Real services: the sandbox (docker and local backends), rollout (the `r2e:` loader over a
file written here), reward and the trainer's servicer, over gRPC with Redis.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr
from sandbox_docker_kit import TEST_IMAGE, TOKEN, AppFactory

from artfleet.runtime.config import ServerSettings
from artfleet.runtime.rpc.client import aio_channel
from artfleet.runtime.rpc.server import GrpcServer
from artfleet.specs.job import spec_to_proto, validate_spec
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_reward.__main__ import RewardApp
from artfleet_reward.settings import RewardSettings
from artfleet_rollout.app import RolloutRuntime
from artfleet_rollout.settings import RolloutSettings
from artfleet_sandbox.__main__ import SandboxApp
from artfleet_sandbox.settings import SandboxSettings
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.images import ImageChecker
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer

pytestmark = pytest.mark.integration
MISSING = ("artfleet-test/no-such-image:1", "artfleet-test/no-such-image:2")


def r2e_file(path: Path, images: Sequence[str]) -> str:
    """R2E-Gym records (train split) whose tasks run in `images`."""
    records = [
        {
            "repo_name": "demo",
            "docker_image": image,
            "instance_id": f"demo-{i}",
            "split": "train",
            "problem_statement": "Fix the bug.",
            "expected_output_json": json.dumps({"test_fix": "PASSED"}),
        }
        for i, image in enumerate(images)
    ]
    path.write_text(json.dumps(records))
    return f"r2e:{path}"


def job(environment: str) -> pb.JobSpec:
    return spec_to_proto(
        validate_spec({"name": "img", "environment": environment, "reward": [{"name": "tests"}]})
    )


def _settings(**values: Any) -> dict[str, Any]:
    return {"api_token": SecretStr(TOKEN), "port": 0, "metrics_port": 0, **values}


@asynccontextmanager
async def trainer(
    sandbox: SandboxApp, redis_url: str, workdir: Path
) -> AsyncIterator[trainer_pb2_grpc.TrainerStub]:
    """Reward, rollout and the trainer's SubmitJob (no job runner: accepted jobs queue)."""
    target = f"127.0.0.1:{sandbox.server.port}"
    async with AsyncExitStack() as stack:
        reward = RewardApp(RewardSettings(**_settings()))
        await reward.start()
        stack.push_async_callback(reward.stop)
        rollout = RolloutRuntime(
            RolloutSettings(
                **_settings(redis_url=redis_url),
                sandbox_target=target,
                reward_target=f"127.0.0.1:{reward.server.port}",
                celery_worker=False,
            )
        )
        await rollout.start()
        stack.push_async_callback(rollout.stop)
        client = aioredis.from_url(redis_url)
        stack.push_async_callback(client.aclose)
        rollouts = RolloutClient(f"127.0.0.1:{rollout.server.port}", TOKEN)
        servicer = TrainerServicer(
            JobStore(client),
            rollouts,
            RewardClient(f"127.0.0.1:{reward.server.port}", TOKEN),
            lambda backend: "",
            art_path=str(workdir / "art"),
            images=ImageChecker(rollouts, target, TOKEN),
        )
        server = GrpcServer(
            ServerSettings(**_settings()),
            "trainer-test",
            [lambda s: trainer_pb2_grpc.add_TrainerServicer_to_server(servicer, s)],
            ["artfleet.v1.Trainer"],
        )
        await server.start()
        stack.push_async_callback(server.stop, 5)
        channel = await stack.enter_async_context(aio_channel(f"127.0.0.1:{server.port}", TOKEN))
        yield trainer_pb2_grpc.TrainerStub(channel)


async def accepted(stub: trainer_pb2_grpc.TrainerStub, environment: str) -> None:
    """Submitted and queued; then cancelled, so no job runner of a later test in this
    session (the Redis is shared) picks it up."""
    job_ = await stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=job(environment)))
    assert job_.state == pb.JOB_STATE_QUEUED
    cancelled = await stub.CancelJob(trainer_pb2.CancelJobRequest(job_id=job_.id))
    assert cancelled.state == pb.JOB_STATE_CANCELLED


async def refusal(stub: trainer_pb2_grpc.TrainerStub, environment: str) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=job(environment)))
    return info.value


async def test_docker_refuses_missing_images_with_the_list(
    sandbox_app: AppFactory, redis_url: str, tmp_path: Path
) -> None:
    async with (
        sandbox_app(pool_size=0) as sandbox,
        trainer(sandbox, redis_url, tmp_path) as stub,
    ):
        await accepted(stub, r2e_file(tmp_path / "present.json", [TEST_IMAGE, TEST_IMAGE]))

        before = await stub.ListJobs(trainer_pb2.ListJobsRequest())
        mixed = r2e_file(tmp_path / "mixed.json", [TEST_IMAGE, *MISSING])
        error = await refusal(stub, mixed)
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
        details = error.details() or ""
        assert "2 image(s)" in details and all(image in details for image in MISSING)
        assert TEST_IMAGE not in details  # only what is missing is listed
        after = await stub.ListJobs(trainer_pb2.ListJobsRequest())
        assert after == before  # the refused job was never stored


async def test_docker_that_pulls_accepts_missing_images(
    sandbox_app: AppFactory, redis_url: str, tmp_path: Path
) -> None:
    async with (
        sandbox_app(pool_size=0, pull_images=True) as sandbox,
        trainer(sandbox, redis_url, tmp_path) as stub,
    ):
        await accepted(stub, r2e_file(tmp_path / "missing.json", list(MISSING)))


async def test_local_backend_refuses_tasks_that_need_an_image(
    redis_url: str, tmp_path: Path
) -> None:
    sandbox = SandboxApp(
        SandboxSettings(
            **_settings(),
            sandbox_backend="local",
            sandbox_allow_unisolated=True,
            workspace_root=str(tmp_path / "sandbox"),
            sandbox_path=f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
        )
    )
    await sandbox.start()
    try:
        async with trainer(sandbox, redis_url, tmp_path) as stub:
            error = await refusal(stub, r2e_file(tmp_path / "r2e.json", [TEST_IMAGE]))
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
            details = error.details() or ""
            assert "local backend" in details and TEST_IMAGE in details
            # An environment without images is not asked about (shell tasks run anywhere).
            await accepted(stub, "shell-tasks")
    finally:
        await sandbox.stop()
