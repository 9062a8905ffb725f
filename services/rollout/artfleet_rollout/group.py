"""One group: `rollouts` episodes of one scenario at once, scored by the reward service."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from openai import AsyncOpenAI

from artfleet import codec
from artfleet.art_types import art
from artfleet.errors import InvalidArgument
from artfleet.rpc.client import aio_channel
from artfleet.sandbox_client import SandboxRouter, describe, is_replica_lost
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, reward_pb2_grpc, rollout_pb2
from artfleet_rollout import metrics
from artfleet_rollout.environments import UnknownEnvironment, get_environment
from artfleet_rollout.episode import EpisodeContext, run_episode
from artfleet_rollout.settings import RolloutSettings

log = logging.getLogger(__name__)


def validate_task(task: rollout_pb2.GroupTask) -> None:
    for field in ("job_id", "group_id", "policy", "model_base_url", "scenario_id"):
        if not getattr(task, field):
            raise InvalidArgument("is required", f"task.{field}")
    for field in ("rollouts", "max_turns", "max_tokens", "max_context_tokens"):
        if getattr(task, field) <= 0:
            raise InvalidArgument("must be > 0", f"task.{field}")


class GroupRunner:
    """Runs groups; clients are made per call so each event loop owns its own channels."""

    def __init__(self, settings: RolloutSettings) -> None:
        self._settings = settings
        self._token = settings.api_token.get_secret_value()

    async def run(self, task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        validate_task(task)
        try:
            scenario = get_environment(task.environment).get(task.scenario_id)
        except UnknownEnvironment as exc:
            raise InvalidArgument(str(exc), "task.environment") from None
        except KeyError as exc:
            raise InvalidArgument(str(exc), "task.scenario_id") from None
        start = time.perf_counter()
        # Retries with backoff ride out a trainer restart (its endpoint comes back, serving
        # the same policy) instead of failing every episode in flight.
        model = AsyncOpenAI(
            base_url=task.model_base_url,
            api_key=self._token,
            max_retries=self._settings.model_retries,
        )
        try:
            async with SandboxRouter(self._settings.sandbox_target, self._token) as router:
                ctx = EpisodeContext(task, scenario, model, router, self._settings)
                results = await asyncio.gather(
                    *(self._episode(ctx, i) for i in range(task.rollouts)),
                    return_exceptions=True,
                )
        finally:
            await model.close()
        response = await self._score(task, results)
        metrics.GROUP_SECONDS.observe(time.perf_counter() - start)
        return response

    async def _episode(self, ctx: EpisodeContext, index: int) -> tuple[art.Trajectory, pb.Episode]:
        """One episode; started again from scratch when its sandbox replica is lost."""
        retries = self._settings.episode_retries
        for attempt in range(retries + 1):
            try:
                return await run_episode(ctx, index)
            except Exception as exc:
                if attempt == retries or not is_replica_lost(exc):
                    raise
                metrics.FAILURES.labels("sandbox_lost").inc()
                log.warning("episode %d: %s; starting it again", index, describe(exc))
        raise AssertionError("unreachable")

    async def _score(
        self,
        task: rollout_pb2.GroupTask,
        results: Sequence[tuple[art.Trajectory, pb.Episode] | BaseException],
    ) -> rollout_pb2.RunGroupResponse:
        trajectories: list[art.Trajectory] = []
        episodes: list[pb.Episode] = []
        errors: list[BaseException] = []
        for result in results:
            if isinstance(result, BaseException):
                log.warning("episode failed: %s", describe(result))
                metrics.FAILURES.labels("episode").inc()
                errors.append(result)
            else:
                trajectory, episode = result
                trajectories.append(trajectory)
                episodes.append(episode)
        group = art.TrajectoryGroup(
            trajectories,
            metadata={
                "group_id": task.group_id,
                "scenario_id": task.scenario_id,
                "step": task.step,
            },
            exceptions=errors,
        )
        message = codec.group_to_proto(group)
        if trajectories:
            message = await self._reward(task, message, episodes)
        return rollout_pb2.RunGroupResponse(group=message, episodes=episodes)

    async def _reward(
        self, task: rollout_pb2.GroupTask, group: pb.TrajectoryGroup, episodes: list[pb.Episode]
    ) -> pb.TrajectoryGroup:
        async with aio_channel(self._settings.reward_target, self._token) as channel:
            scored = await reward_pb2_grpc.RewardStub(channel).ScoreGroup(
                reward_pb2.ScoreGroupRequest(group=group, episodes=episodes, spec=task.reward),
                timeout=600,
            )
        return scored.group
