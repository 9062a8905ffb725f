"""At submit: a job whose tasks name per-task images (R2E-Gym's `docker_image`, SWE-bench
images) is refused when the sandbox cannot run them, with the list, instead of failing
episode after episode once it runs.

The trainer holds no Docker socket: it asks a sandbox replica (`Sandbox.ImageCheck`), which
answers for its engine. Replicas of one deployment share the engine (or the same images
are loaded on each), so one answer stands for all.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from artfleet.contracts.errors import FailedPrecondition, Unavailable
from artfleet.runtime.rpc.client import aio_channel
from artfleet.specs.job import JobSpecModel
from artfleet.v1 import rollout_pb2, sandbox_pb2, sandbox_pb2_grpc
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs import scheduling

_LISTED = 20  # missing images named in the message; the rest are counted


def job_images(info: rollout_pb2.EnvironmentInfo, spec: JobSpecModel) -> list[str]:
    """The images of the scenarios the job will run: its split (narrowed by
    dataset_size as the runner narrows it) and, when it evaluates, its eval split."""
    by_split: dict[str, dict[str, str]] = {}
    for scenario in info.scenarios:
        by_split.setdefault(scenario.split, {})[scenario.id] = scenario.image
    train = by_split.get(spec.split, {})
    ids = scheduling.dataset(sorted(train), spec.seed, spec.dataset_size)
    images = {train[i] for i in ids}
    if spec.eval_every_steps > 0:
        images |= set(by_split.get(spec.eval_split, {}).values())
    return sorted(image for image in images if image)


def refusal(response: sandbox_pb2.ImageCheckResponse) -> str:
    """Why the job cannot run, or "" when it can."""
    missing = list(response.missing)
    if not missing or (response.pull_allowed and response.runs_images):
        return ""
    shown = ", ".join(missing[:_LISTED])
    more = f" and {len(missing) - _LISTED} more" if len(missing) > _LISTED else ""
    if not response.runs_images:
        return (
            f"the job's tasks need their own images, which the sandbox's {response.backend} "
            f"backend cannot run (it ignores images): {shown}{more}; use the docker backend"
        )
    return (
        f"{len(missing)} image(s) the job's tasks need are not on the sandbox's Docker "
        f"engine, and this deployment does not pull (ARTFLEET_PULL_IMAGES): {shown}{more}"
    )


class ImageChecker:
    """Asks the sandbox service which of a job's images it lacks."""

    def __init__(self, rollout: RolloutClient, sandbox_target: str, token: str) -> None:
        self._rollout = rollout
        # A comma list (replicas named one by one): any one answers for the shared engine.
        self._sandbox_target = sandbox_target.split(",")[0].strip()
        self._token = token

    async def check(self, spec: JobSpecModel) -> None:
        """Raises FailedPrecondition naming the missing images; returns when none is."""
        images = job_images(await self._rollout.describe(spec.environment), spec)
        if images:
            reason = refusal(await self.ask(images))
            if reason:
                raise FailedPrecondition(reason)

    async def ask(self, images: Sequence[str]) -> sandbox_pb2.ImageCheckResponse:
        async with aio_channel(self._sandbox_target, self._token) as channel:
            stub = sandbox_pb2_grpc.SandboxStub(channel)
            try:
                return await stub.ImageCheck(
                    sandbox_pb2.ImageCheckRequest(images=list(images)), timeout=60
                )
            except grpc.aio.AioRpcError as exc:
                raise Unavailable(
                    f"cannot check the job's images with the sandbox service "
                    f"{self._sandbox_target}: {exc.details()}"
                ) from None
