"""The Reward gRPC service: scores a group's trajectories and returns the group with
each trajectory's `reward` set. The process entrypoint (auth, health, metrics endpoint)
is the shared one; it only needs `build_servicer`."""

from __future__ import annotations

from typing import Any, NoReturn

import grpc

from artfleet.errors import InvalidArgument
from artfleet.v1 import reward_pb2, reward_pb2_grpc

from .metrics import TOTAL, RewardMetrics, default_metrics
from .scorers import EpisodeScore, InvalidSpec, ScorerFailed, resolve_spec, score_episode
from .settings import RewardSettings

SERVICE_NAME = "artfleet.v1.Reward"
# `scorer` label of failures that happen before any scorer runs. User-given scorer names
# are never used as labels: an unknown name would add a time series per typo.
_REQUEST_LABEL = "request"
_METRIC_PREFIX = "reward_"  # trajectory metrics `reward_<scorer>` = unweighted component


async def _abort(context: Any, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("context.abort returned")  # it raises; this tells the type checker


class RewardServicer(reward_pb2_grpc.RewardServicer):
    def __init__(self, metrics: RewardMetrics | None = None) -> None:
        self._metrics = metrics or default_metrics()

    def score(self, request: reward_pb2.ScoreGroupRequest) -> reward_pb2.ScoreGroupResponse:
        """The whole RPC without the transport: raises InvalidArgument or ScorerFailed."""
        trajectories = len(request.group.trajectories)
        if len(request.episodes) != trajectories:
            raise InvalidArgument(
                f"{len(request.episodes)} episodes for {trajectories} trajectories; "
                "send one episode per trajectory, in the same order",
                field="episodes",
            )
        scorers = resolve_spec(request.spec if request.HasField("spec") else None)
        scores = [score_episode(scorers, episode) for episode in request.episodes]
        response = reward_pb2.ScoreGroupResponse()
        response.group.CopyFrom(request.group)
        for trajectory, score in zip(response.group.trajectories, scores, strict=True):
            trajectory.reward = score.reward
            for name, value in score.components.items():
                # Components as trajectory metrics: ART logs them per step for free.
                trajectory.metrics[_METRIC_PREFIX + name].float_value = value
            response.scores.append(
                reward_pb2.TrajectoryScore(reward=score.reward, components=score.components)
            )
        self._observe(scores)
        return response

    def _observe(self, scores: list[EpisodeScore]) -> None:
        for score in scores:
            self._metrics.score.labels(scorer=TOTAL).observe(score.reward)
            for name, value in score.components.items():
                self._metrics.score.labels(scorer=name).observe(value)

    async def ValidateSpec(
        self, request: reward_pb2.ValidateSpecRequest, context: Any
    ) -> reward_pb2.ValidateSpecResponse:
        try:
            scorers = resolve_spec(request.spec if request.HasField("spec") else None)
        except InvalidSpec as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return reward_pb2.ValidateSpecResponse(scorers=[s.name for s in scorers])

    async def ScoreGroup(
        self, request: reward_pb2.ScoreGroupRequest, context: Any
    ) -> reward_pb2.ScoreGroupResponse:
        self._metrics.requests.inc()
        with self._metrics.scoring_seconds.time():
            try:
                return self.score(request)
            except InvalidSpec as exc:
                self._metrics.failures.labels(scorer=_REQUEST_LABEL, type="invalid_spec").inc()
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            except InvalidArgument as exc:
                self._metrics.failures.labels(scorer=_REQUEST_LABEL, type="invalid_request").inc()
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            except ScorerFailed as exc:
                # A bug in a scorer: fail loudly rather than train on a made-up reward.
                self._metrics.failures.labels(scorer=exc.scorer, type="scorer_error").inc()
                await _abort(context, grpc.StatusCode.INTERNAL, str(exc))


def build_servicer(
    settings: RewardSettings, metrics: RewardMetrics | None = None
) -> RewardServicer:
    """The servicer the shared server registers (`add_RewardServicer_to_server`)."""
    del settings  # nothing configurable yet; kept so the entrypoint's call stays stable
    return RewardServicer(metrics)


def register(servicer: RewardServicer) -> Any:
    """A registrar for `artfleet.rpc.server.GrpcServer(registrars=[...])`."""

    def add(server: grpc.aio.Server) -> None:
        reward_pb2_grpc.add_RewardServicer_to_server(servicer, server)

    return add
