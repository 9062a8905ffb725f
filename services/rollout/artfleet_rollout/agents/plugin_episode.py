"""The worker's side of `artfleet.clients.episode` for one episode of the `art` kind: the
sandbox sessions a rollout opens (the episode's router, with the worker's owner lease),
its test record, the reward service's scorers, and which episode it is (`rollout`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from artfleet.clients.episode import RolloutContext, Score, ScoringFailed, TestRun
from artfleet.contracts import codec
from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout.agents.context import EpisodeContext
from artfleet_rollout.ports import Workspace, WorkspaceSpec
from artfleet_rollout.repo_episode import suite_summary
from artfleet_rollout.scoring import dropped_indices


class FleetEpisode:
    def __init__(
        self, ctx: EpisodeContext, episode: pb.Episode, plugin: str, rollout: RolloutContext
    ) -> None:
        self._ctx = ctx
        self._episode = episode
        self._plugin = plugin
        self._rollout = rollout

    @property
    def rollout(self) -> RolloutContext:
        return self._rollout

    async def open_session(
        self, files: Mapping[str, str], *, image: str, network: bool
    ) -> Workspace:
        spec = WorkspaceSpec(
            job_id=self._ctx.task.job_id, files=files, image=image, network=network
        )
        return await self._ctx.workspaces.open(spec)

    def tests_ran(self, run: TestRun, seconds: float) -> None:
        summary = suite_summary(run)
        self._episode.tests.CopyFrom(summary)
        self._episode.tests_seconds = seconds
        self._episode.check_ran, self._episode.check_passed = True, summary.resolved

    async def score(
        self, trajectories: Sequence[art.Trajectory], spec: pb.RewardSpec
    ) -> list[Score]:
        reward = self._ctx.reward
        if reward is None:
            raise RuntimeError(f"{self._plugin}: score() needs the reward service; none is set")
        group = codec.group_to_proto(art.TrajectoryGroup(list(trajectories)), tokens=False)
        reply = await reward.score(group, [self._episode] * len(trajectories), spec)
        outcome = reply.outcome
        if outcome.fail_job:
            raise ScoringFailed(f"{self._plugin}: {outcome.fail_job}")
        if outcome.group_dropped:
            return [Score(0.0, {}, {}, [], dropped=True) for _ in trajectories]
        dropped = dropped_indices(reply, len(trajectories))
        return [
            Score(s.reward, dict(s.components), dict(s.metrics), list(s.logs), i in dropped)
            for i, s in enumerate(reply.scores)
        ]
