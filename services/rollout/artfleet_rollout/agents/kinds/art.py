"""The `art` kind: an ART rollout function (art_environment.ArtEnvironment) runs as written.

The function gets an `art.Model` bound to the job's policy: `model.name` is the job's
model, `model.get_inference_name()` the served `name@step`, and `model.openai_client()` a
client whose `chat.completions.create` goes through the episode's policy port, like every
bundled kind's turns. So each choice it returns carries the prompt and completion token
ids and logprobs (the trainer trains exactly what was sampled), the job's sampling
settings apply, and a policy outage holds the group as for any kind. What the function
returns becomes the episode's trajectory: its messages and choices, tools, reward
(`rollout_reward`, this kind's default scorer), metrics and metadata.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import CompletionUsage

from artfleet.clients.episode import CURRENT
from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout import metrics
from artfleet_rollout.agents.context import EpisodeContext
from artfleet_rollout.agents.plugin_episode import FleetEpisode
from artfleet_rollout.art_environment import ART_KIND, ArtTask
from artfleet_rollout.ports import Policy

KIND = ART_KIND


class PluginFailure(RuntimeError):
    """The plugin's rollout broke the contract (what it returned, the model it named)."""


class _Session:
    """One episode's calls: the policy, the names it answers to, the choices it sampled."""

    def __init__(self, ctx: EpisodeContext, plugin: str) -> None:
        self.policy: Policy = ctx.policy
        self.served = ctx.task.policy  # name@step
        self.model_name = self.served.rpartition("@")[0] or self.served
        self.plugin = plugin
        self.default_version = ctx.task.policy_version
        self.sampled: set[int] = set()  # id() of each Choice handed out
        self.versions: list[int | None] = []

    def check_model(self, model: str) -> None:
        if model not in (self.served, self.model_name):
            raise PluginFailure(
                f"{self.plugin}: the rollout asked for model {model!r}; this job serves "
                f"{self.served!r} (use model.get_inference_name() or model.name)"
            )


class _Completions:
    def __init__(self, session: _Session) -> None:
        self._session = session

    async def create(
        self,
        *,
        model: str,
        messages: Sequence[Any],
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        stream: bool = False,
        **ignored: Any,  # temperature, max_tokens, ...: the job's sampling settings apply
    ) -> ChatCompletion:
        session = self._session
        session.check_model(model)
        if stream:
            raise PluginFailure(
                f"{session.plugin}: stream=True is not served to rollouts (the trainer needs "
                "each turn's sampled tokens): call create() without stream"
            )
        start = time.perf_counter()
        turn = await session.policy.complete(list(messages), tools=tools, tool_choice=tool_choice)
        metrics.MODEL_SECONDS.observe(time.perf_counter() - start)
        session.sampled.add(id(turn.choice))
        session.versions.append(turn.policy_version)
        usage = turn.usage
        return ChatCompletion.model_construct(  # the same Choice object, token ids and all
            id=f"artfleet-{len(session.sampled)}",
            object="chat.completion",
            created=int(time.time()),
            model=session.served,
            choices=[turn.choice],
            usage=CompletionUsage(
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                total_tokens=usage.prompt_tokens + usage.completion_tokens,
            )
            if usage
            else None,
        )


class PolicyClient:
    """What `model.openai_client()` returns inside the fleet: `chat.completions.create`."""

    def __init__(self, session: _Session) -> None:
        self.chat = SimpleNamespace(completions=_Completions(session))

    def with_options(self, **_: Any) -> PolicyClient:
        return self


def bound_model(ctx: EpisodeContext, session: _Session) -> art.Model[Any, Any]:
    model: art.Model[Any, Any] = art.Model(
        name=session.model_name,
        project="artfleet",
        inference_model_name=session.served,
        inference_base_url=ctx.task.model_base_url,
    )
    # ART's openai_client() returns this once set (art.Model keeps its client there).
    model._openai_client = cast(AsyncOpenAI, PolicyClient(session))
    return model


async def run_art(ctx: EpisodeContext, trajectory: art.Trajectory, episode: pb.Episode) -> None:
    task = ctx.scenario.payload
    if not isinstance(task, ArtTask):
        raise PluginFailure(
            f"scenario {ctx.scenario.id!r} has no ART rollout: the `art` kind runs the "
            "environments an ArtEnvironment declares"
        )
    session = _Session(ctx, task.plugin)
    timeout_s = ctx.settings.plugin_timeout_s
    services = CURRENT.set(FleetEpisode(ctx, episode, task.plugin))
    try:
        rollout = task.rollout(bound_model(ctx, session), task.scenario)
        result = await asyncio.wait_for(rollout, timeout_s)
    except TimeoutError:
        raise PluginFailure(
            f"{task.plugin}: the rollout did not return within {timeout_s:g}s "
            "(ARTFLEET_PLUGIN_TIMEOUT_S)"
        ) from None
    finally:
        CURRENT.reset(services)
    _check(result, session)
    trajectory.messages_and_choices = list(result.messages_and_choices)
    trajectory.tools = result.tools
    trajectory.reward = result.reward
    trajectory.metrics.update(result.metrics)
    for key, value in result.metadata.items():
        trajectory.metadata.setdefault(key, value)  # the fleet's keys win
    trajectory.logs.extend(result.logs)
    versions = [v if v is not None else session.default_version for v in session.versions]
    trajectory.initial_policy_version, trajectory.final_policy_version = versions[0], versions[-1]
    episode.finish = "rollout"


def _check(result: Any, session: _Session) -> None:
    if not isinstance(result, art.Trajectory):
        raise PluginFailure(
            f"{session.plugin}: the rollout returned {type(result).__name__}, not an art.Trajectory"
        )
    choices = [item for item in result.messages_and_choices if isinstance(item, Choice)]
    if not choices:
        raise PluginFailure(
            f"{session.plugin}: the trajectory has no assistant turn sampled from the policy "
            f"({len(result.messages_and_choices)} messages, no choice): append each "
            "completion's choice to messages_and_choices"
        )
    foreign = sum(id(choice) not in session.sampled for choice in choices)
    if foreign:
        raise PluginFailure(
            f"{session.plugin}: {foreign} of {len(choices)} choices in the trajectory were not "
            "sampled through model.openai_client() in this episode (no tokens to train on)"
        )
