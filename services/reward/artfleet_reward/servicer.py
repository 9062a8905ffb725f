"""The Reward gRPC service: scores a group's trajectories and answers one typed score
per trajectory and the outcome of the spec's failure policies (dropped trajectories, a
dropped group, a failed job), never a copy of the group. The process entrypoint (auth,
health, metrics endpoint) is the shared one; it only needs `build_servicer`."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, NoReturn

import grpc

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.base import InvalidSpec
from artfleet.specs.reward import DROP_GROUP, DROP_TRAJECTORY, FAIL_JOB
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, reward_pb2_grpc

from .composite import GROUP, GroupOutcome, score_group
from .metrics import TOTAL, RewardMetrics, default_metrics
from .scorers.base import GroupContext, Runtime
from .scorers.llm import JudgeCache
from .settings import RewardSettings
from .spec import resolve_spec

log = logging.getLogger(__name__)
SERVICE_NAME = "artfleet.v1.Reward"
# `scorer` label of failures that happen before any scorer runs. User-given scorer names
# are never used as labels: only names the registry knows get that far.
_REQUEST_LABEL = "request"


async def _abort(context: Any, code: grpc.StatusCode, message: str) -> NoReturn:
    await context.abort(code, message)
    raise AssertionError("context.abort returned")  # it raises; this tells the type checker


class RewardServicer(reward_pb2_grpc.RewardServicer):
    def __init__(
        self, metrics: RewardMetrics | None = None, settings: RewardSettings | None = None
    ) -> None:
        self._metrics = metrics or default_metrics()
        if settings is None:
            # Tests that need no judge or MCP server: defaults, and a token no one uses.
            settings = RewardSettings(api_token="unused-outside-a-fleet")  # type: ignore[arg-type]
        self._runtime = Runtime(settings, self._metrics, JudgeCache(settings.judge_cache_size))

    async def score(self, request: reward_pb2.ScoreGroupRequest) -> reward_pb2.ScoreGroupResponse:
        """The whole RPC without the transport: raises InvalidArgument for a bad request."""
        trajectories = len(request.group.trajectories)
        if len(request.episodes) != trajectories:
            raise InvalidArgument(
                f"{len(request.episodes)} episodes for {trajectories} trajectories; "
                "send one episode per trajectory, in the same order",
                field="episodes",
            )
        spec = resolve_spec(request.spec if request.HasField("spec") else None)
        ctx = GroupContext(request.group.trajectories, request.episodes, spec.policy, self._runtime)
        outcome = await score_group(spec, ctx)
        self._observe(outcome)
        return _response(outcome)

    def _observe(self, outcome: GroupOutcome) -> None:
        for failure in outcome.failures:
            self._metrics.failures.labels(scorer=failure.scorer, type=failure.type).inc()
            count = 1
            if failure.action == DROP_TRAJECTORY and failure.trajectory == GROUP:
                count = sum(t.dropped for t in outcome.trajectories)
            if failure.action in (DROP_TRAJECTORY, DROP_GROUP, FAIL_JOB):
                self._metrics.dropped.labels(scorer=failure.scorer, action=failure.action).inc(
                    count
                )
            log.warning(
                "scorer %s failed (%s) on %s: %s -> %s",
                failure.scorer,
                failure.type,
                "the group" if failure.trajectory == GROUP else f"trajectory {failure.trajectory}",
                failure.message,
                failure.action,
            )
        if outcome.stopped:
            return
        for trajectory in outcome.trajectories:
            if trajectory.dropped:
                continue
            self._metrics.score.labels(scorer=TOTAL).observe(trajectory.reward)
            for name, value in trajectory.components.items():
                self._metrics.score.labels(scorer=name).observe(value)

    async def ValidateSpec(
        self, request: reward_pb2.ValidateSpecRequest, context: Any
    ) -> reward_pb2.ValidateSpecResponse:
        try:
            spec = resolve_spec(request.spec if request.HasField("spec") else None)
        except InvalidSpec as exc:
            await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return reward_pb2.ValidateSpecResponse(scorers=spec.names)

    async def ScoreGroup(
        self, request: reward_pb2.ScoreGroupRequest, context: Any
    ) -> reward_pb2.ScoreGroupResponse:
        self._metrics.requests.inc()
        with self._metrics.scoring_seconds.time():
            try:
                return await self.score(request)
            except InvalidSpec as exc:
                self._metrics.failures.labels(scorer=_REQUEST_LABEL, type="invalid_spec").inc()
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            except InvalidArgument as exc:
                self._metrics.failures.labels(scorer=_REQUEST_LABEL, type="invalid_request").inc()
                await _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))


def _response(outcome: GroupOutcome) -> reward_pb2.ScoreGroupResponse:
    """Scores parallel to the request's trajectories, and what the failure policies decided
    (see reward.proto): the caller applies them to its own group, which never travels back."""
    response = reward_pb2.ScoreGroupResponse(
        outcome=pb.RewardOutcome(
            dropped=[i for i, t in enumerate(outcome.trajectories) if t.dropped],
            group_dropped=outcome.group_dropped,
            fail_job=outcome.fail_job,
            # A Failure has the message's fields, one for one.
            failures=[pb.ScorerFailure(**dataclasses.asdict(f)) for f in outcome.failures],
        )
    )
    if outcome.stopped:
        return response  # no score of this group may be used
    for result in outcome.trajectories:
        score = response.scores.add(
            reward=result.reward,
            components=result.components,
            dropped=result.dropped,
            metrics=result.metrics,
            logs=result.logs,
        )
        if result.independent_reward is not None:
            score.independent_reward = result.independent_reward
    return response


def build_servicer(
    settings: RewardSettings, metrics: RewardMetrics | None = None
) -> RewardServicer:
    """The servicer the shared server registers (`add_RewardServicer_to_server`)."""
    return RewardServicer(metrics, settings)


def register(servicer: RewardServicer) -> Any:
    """A registrar for `artfleet.runtime.rpc.server.GrpcServer(registrars=[...])`."""

    def add(server: grpc.aio.Server) -> None:
        reward_pb2_grpc.add_RewardServicer_to_server(servicer, server)

    return add
