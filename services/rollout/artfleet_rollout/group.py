"""One group: `rollouts` episodes of one scenario at once, scored by the reward service.

`GroupRunner` is started on the event loop that will run its groups (the worker's loop,
shared with the gRPC server) and keeps its connections (one reward channel, one sandbox
router, OpenAI clients per endpoint and key) across groups until it is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

import httpx

from artfleet.clients.replicas import split_urls
from artfleet.contracts import codec, seeds
from artfleet.contracts.art_types import art
from artfleet.contracts.env_names import ENV_VAR_NAME
from artfleet.contracts.errors import InvalidArgument
from artfleet.runtime.outage import OutageClock, wait_until_back
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_rollout import failures, metrics
from artfleet_rollout.environments import (
    BrokenEnvironment,
    Environment,
    Scenario,
    UnknownEnvironment,
    get_environment,
)
from artfleet_rollout.environments.loaders import LoaderError
from artfleet_rollout.episode import EpisodeContext, run_episode
from artfleet_rollout.ports import Connections, PolicyUnavailable, WorkspaceLost
from artfleet_rollout.scoring import apply_scores, describe_outcome
from artfleet_rollout.settings import RolloutSettings

log = logging.getLogger(__name__)

Connect = Callable[[RolloutSettings], Awaitable[Connections]]
# The fleet's own settings (Redis URL with its password, ...) are never a model key.
_FLEET_PREFIX = "ARTFLEET_"
EpisodeResult = tuple[art.Trajectory, pb.Episode]
_CHECK_TIMEOUT_S = 60.0  # a checkpoint served on request loads within the first call
# A held group notices the endpoint is back within this (one /models call per pause).
_OUTAGE_PROBE_MAX_PAUSE_S = 5.0


def validate_task(task: rollout_pb2.GroupTask) -> None:
    for field in ("job_id", "group_id", "policy", "model_base_url", "scenario_id"):
        if not getattr(task, field):
            raise InvalidArgument("is required", f"task.{field}")
    for field in ("rollouts", "max_turns", "max_tokens", "max_context_tokens"):
        if getattr(task, field) <= 0:
            raise InvalidArgument("must be > 0", f"task.{field}")
    check_base_url(task.model_base_url, "task.model_base_url")


def check_base_url(url: str, field: str) -> None:
    """An http(s) URL the OpenAI client can request, or a comma list of them (inference
    replicas). Checked before the client is made: httpx refuses some URLs (a
    non-printable character, a bad port) with InvalidURL when the client is built, which
    would surface as INTERNAL instead of naming the field."""
    urls = split_urls(url)
    if not urls:
        raise InvalidArgument("must be an http(s) URL with a host", field)
    for one in urls:
        try:
            parsed = httpx.URL(one)
        except httpx.InvalidURL as exc:
            raise InvalidArgument(f"is not a valid URL: {exc}", field) from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise InvalidArgument("must be an http(s) URL with a host", field)


def task_environment(task: rollout_pb2.GroupTask) -> Environment:
    try:
        return get_environment(task.environment)
    except (UnknownEnvironment, BrokenEnvironment, LoaderError) as exc:
        raise InvalidArgument(str(exc), "task.environment") from None


def task_scenario(task: rollout_pb2.GroupTask) -> Scenario:
    try:
        return task_environment(task).get(task.scenario_id)
    except KeyError as exc:
        raise InvalidArgument(str(exc), "task.scenario_id") from None


def policy_api_key(
    task: rollout_pb2.GroupTask, fleet_token: str, environ: Mapping[str, str]
) -> str:
    """The fleet token, or the variable the task names (keys never travel in a task)."""
    name = task.model_api_key_env
    if not name:
        return fleet_token
    field = "task.model_api_key_env"
    if not ENV_VAR_NAME.match(name):
        raise InvalidArgument(f"{name!r} is not an environment variable name", field)
    if name.upper().startswith(_FLEET_PREFIX):
        raise InvalidArgument(f"{name} is a fleet setting, not a model API key", field)
    value = environ.get(name, "")
    if not value:
        raise InvalidArgument(f"{name} is not set in the rollout service's environment", field)
    return value


class JobLimits:
    """Each job's `max_concurrent`: a semaphore shared by the job's groups running in this
    worker, dropped when the last of them ends."""

    def __init__(self) -> None:
        self._limits: dict[str, tuple[asyncio.Semaphore, int]] = {}

    @contextlib.asynccontextmanager
    async def group(self, task: rollout_pb2.GroupTask) -> AsyncIterator[asyncio.Semaphore | None]:
        if task.max_concurrent <= 0:
            yield None
            return
        semaphore, users = self._limits.get(task.job_id, (None, 0))
        if semaphore is None:
            semaphore = asyncio.Semaphore(task.max_concurrent)
        self._limits[task.job_id] = (semaphore, users + 1)
        try:
            yield semaphore
        finally:
            semaphore, users = self._limits[task.job_id]
            if users == 1:
                del self._limits[task.job_id]
            else:
                self._limits[task.job_id] = (semaphore, users - 1)


class GroupRunner:
    """start() on the loop that runs the groups; run() any number of groups; stop()."""

    def __init__(
        self,
        settings: RolloutSettings,
        *,
        connect: Connect | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._settings = settings
        self._token = settings.api_token.get_secret_value()
        self._connect = connect
        self._environ = os.environ if environ is None else environ
        self._connections: Connections | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._limits = JobLimits()

    @property
    def settings(self) -> RolloutSettings:
        return self._settings

    async def start(self) -> None:
        if self._connections is not None:
            raise RuntimeError("GroupRunner already started")
        if self._connect is None:
            from artfleet_rollout.adapters import connect  # the product's OpenAI/gRPC parts

            self._connect = connect
        self._connections = await self._connect(self._settings)
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        connections, self._connections = self._connections, None
        if connections is not None:
            await connections.close()

    def _started(self) -> Connections:
        if self._connections is None:
            raise RuntimeError("GroupRunner.run before start() (or after stop())")
        if asyncio.get_running_loop() is not self._loop:
            raise RuntimeError("GroupRunner.run on another event loop than the one it started on")
        return self._connections

    async def run(self, task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        connections = self._started()
        validate_task(task)
        scenario = task_scenario(task)
        environment = task_environment(task)
        api_key = policy_api_key(task, self._token, self._environ)
        policy = connections.policies.policy(task, api_key)
        start = time.perf_counter()
        ctx = EpisodeContext(
            task,
            scenario,
            policy,
            connections.workspaces,
            self._settings,
            agent=environment.agent,
            token=self._token,
            tool_choice=(
                environment.tool_choice if scenario.tool_choice is None else scenario.tool_choice
            ),
            reward=connections.reward,
        )
        results = await self._held_through_outages(task, ctx, connections, api_key)
        response = await self._score(connections, task, results)
        metrics.GROUP_SECONDS.observe(time.perf_counter() - start)
        return response

    async def _held_through_outages(
        self, task: rollout_pb2.GroupTask, ctx: EpisodeContext, connections: Connections, key: str
    ) -> list[EpisodeResult | BaseException]:
        """The group's episodes; while the policy endpoint is down (an episode raised
        PolicyUnavailable: not the episodes' fault) the group is held (its lease renewed
        meanwhile) and all of it runs again once the endpoint serves the policy."""
        outage = OutageClock(self._settings.policy_outage_s)
        while True:
            async with self._limits.group(task) as limit:
                results = await asyncio.gather(
                    *(self._episode(ctx, i, limit) for i in range(task.rollouts)),
                    return_exceptions=True,
                )
            lost = next((e for r in results if (e := policy_outage(r)) is not None), None)
            if lost is None:
                return results
            metrics.FAILURES.labels("policy_unavailable").inc()
            log.warning("group %s: policy unavailable (%s); holding it", task.group_id, lost)
            await wait_until_back(
                lambda: connections.policies.served(task, key),
                outage,
                str(lost),
                what="the policy endpoint",
                setting="ARTFLEET_POLICY_OUTAGE_S",
                max_pause_s=_OUTAGE_PROBE_MAX_PAUSE_S,
            )
            log.info("group %s: the policy serves again; running it again", task.group_id)

    async def check_policy(
        self, request: rollout_pb2.CheckPolicyRequest
    ) -> rollout_pb2.CheckPolicyResponse:
        """What the policy endpoint answers from here, with the key a task would use."""
        for field in ("model_base_url", "policy"):
            if not getattr(request, field):
                raise InvalidArgument("is required", field)
        check_base_url(request.model_base_url, "model_base_url")
        task = rollout_pb2.GroupTask(model_api_key_env=request.model_api_key_env)
        api_key = policy_api_key(task, self._token, self._environ)
        from artfleet_rollout.adapters import check_policy  # the product's OpenAI part

        return await check_policy(
            request.model_base_url, request.policy, api_key, timeout_s=_CHECK_TIMEOUT_S
        )

    async def _episode(
        self, ctx: EpisodeContext, index: int, limit: asyncio.Semaphore | None
    ) -> EpisodeResult:
        """One episode (after a place under the job's limit, if it has one)."""
        if limit is None:
            return await self._attempts(ctx, index)
        async with limit:
            return await self._attempts(ctx, index)

    async def _attempts(self, ctx: EpisodeContext, index: int) -> EpisodeResult:
        """One episode; started again from scratch when its workspace is lost. Each
        attempt's policy calls are keyed by the episode (kept on one inference replica)
        and seeded from the rollout's seed, from its first call on (as a fresh episode)."""
        retries = self._settings.episode_retries
        key, seed = f"{ctx.task.group_id}/{index}", seeds.rollout_seed(ctx.task.seed, index)
        for attempt in range(retries + 1):
            try:
                policy = ctx.policy.for_episode(key, seed)
                return await run_episode(dataclasses.replace(ctx, policy=policy), index)
            except WorkspaceLost as exc:  # counted where it was found (the adapter)
                if attempt == retries:
                    raise
                log.warning("episode %d: %s; starting it again", index, exc)
        raise AssertionError("unreachable")

    async def _score(
        self,
        connections: Connections,
        task: rollout_pb2.GroupTask,
        results: Sequence[EpisodeResult | BaseException],
    ) -> rollout_pb2.RunGroupResponse:
        trajectories, episodes, errors = _split(task, results)
        metadata: dict[str, str | int] = {
            "group_id": task.group_id,
            "scenario_id": task.scenario_id,
            "step": task.step,
        }
        group = art.TrajectoryGroup(trajectories, metadata=dict(metadata))
        response = rollout_pb2.RunGroupResponse()
        if group.trajectories:
            # The reward service reads text only: no token logprobs or ids on the wire.
            request = codec.group_to_proto(group, tokens=False)
            reply = await connections.reward.score(request, episodes, task.reward)
            scored = apply_scores(group.trajectories, episodes, reply)
            if scored.outcome.failures or scored.stopped:
                log.warning("group %s: reward %s", task.group_id, describe_outcome(scored.outcome))
            group.trajectories, episodes = scored.trajectories, scored.episodes
            response.outcome.CopyFrom(scored.outcome)
        # Only now, scored and trimmed, the group goes out with its tokens.
        response.group.CopyFrom(codec.group_to_proto(group))
        # Its failed episodes with their user frames (ART's exceptions keep no frames).
        response.group.exceptions.extend(errors)
        response.episodes.extend(episodes)
        return response


def policy_outage(result: object) -> PolicyUnavailable | None:
    """The PolicyUnavailable an episode ended with, also from inside the exception groups
    of an MCP session's task group; None for any other result."""
    if isinstance(result, PolicyUnavailable):
        return result
    if isinstance(result, BaseExceptionGroup):
        match, _ = result.split(PolicyUnavailable)
        if match is not None:
            return policy_outage(match.exceptions[0])
    return None


def _split(
    task: rollout_pb2.GroupTask, results: Sequence[EpisodeResult | BaseException]
) -> tuple[list[art.Trajectory], list[pb.Episode], list[pb.RolloutException]]:
    trajectories: list[art.Trajectory] = []
    episodes: list[pb.Episode] = []
    errors: list[pb.RolloutException] = []
    for index, result in enumerate(results):
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result  # cancellation and exits are not episode failures
            metrics.FAILURES.labels("episode").inc()
            errors.append(failures.logged(task, result, f"episode {index}"))
        else:
            trajectories.append(result[0])
            episodes.append(result[1])
    return trajectories, episodes, errors
