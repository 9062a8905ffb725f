"""The `art` kind: an ART rollout function (art_environment.ArtEnvironment) runs as written.

The function is called in the shape it was written in (art_shapes: `rollout(model,
scenario)`, `rollout(model, step, is_validation)`, ...), with an `art.Model` bound to the
job's policy: `model.name` is the job's model, `model.get_inference_name()` the served
`name@step`, and `model.openai_client()` a client whose `chat.completions.create` goes
through the episode's policy port, like every bundled kind's turns, inside the job's
budget (agents/art_client.py). So each choice it returns carries the prompt and
completion token ids and logprobs (the trainer trains exactly what was sampled), the
job's sampling settings apply, and a policy outage holds the group as for any kind. What
the function returns becomes the episode's trajectory: its messages and choices, tools,
reward (`rollout_reward`, this kind's default scorer), metrics and metadata. When the
budget ends it first, the episode keeps the conversation as far as it went (finish
`max_turns` or `context`) and is scored as any other.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openai.types.chat.chat_completion import Choice

from artfleet.clients.episode import CURRENT, BudgetExhausted, RolloutContext
from artfleet.contracts import evaluation, seeds
from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout.agents.art_client import PluginFailure, PolicySession, bound_model
from artfleet_rollout.agents.context import EpisodeContext
from artfleet_rollout.agents.plugin_episode import FleetEpisode
from artfleet_rollout.art_environment import ART_KIND, ArtTask
from artfleet_rollout.art_shapes import IS_VALIDATION, MODEL, SCENARIO, STEP

KIND = ART_KIND
__all__ = ["KIND", "PluginFailure", "run_art"]


def rollout_context(ctx: EpisodeContext, index: int) -> RolloutContext:
    task = ctx.task
    return RolloutContext(
        job_id=task.job_id,
        step=task.step,
        split=ctx.scenario.split,
        is_validation=evaluation.is_eval_job(task.job_id),
        scenario_id=ctx.scenario.id,
        rollout_index=index,
        seed=seeds.rollout_seed(task.seed, index),
    )


async def run_art(ctx: EpisodeContext, trajectory: art.Trajectory, episode: pb.Episode) -> None:
    task = ctx.scenario.payload
    if not isinstance(task, ArtTask):
        raise PluginFailure(
            f"scenario {ctx.scenario.id!r} has no ART rollout: the `art` kind runs the "
            "environments an ArtEnvironment declares"
        )
    session = PolicySession(ctx, task.plugin)
    info = rollout_context(ctx, int(trajectory.metadata.get("rollout_index") or 0))
    values = {
        MODEL: bound_model(ctx, session),
        SCENARIO: task.scenario,
        STEP: info.step,
        IS_VALIDATION: info.is_validation,
    }
    services = CURRENT.set(FleetEpisode(ctx, episode, task.plugin, info))
    try:
        result = await _rollout(task, values, session, ctx.settings.plugin_timeout_s)
    finally:
        CURRENT.reset(services)
    if result is None:  # the budget ended it: the conversation as far as it went
        assert session.ended is not None
        trajectory.messages_and_choices = session.kept()
        trajectory.tools = session.ended.tools
        trajectory.logs.append(str(session.ended.stop))
    else:
        _check(result, session)
        _take(trajectory, result)
    _record(trajectory, session)
    episode.finish = session.ended.stop.finish if session.ended else "rollout"


async def _rollout(
    task: ArtTask, values: dict[str, Any], session: PolicySession, timeout_s: float
) -> art.Trajectory | None:
    """What the rollout returned; None when the budget ended it (BudgetExhausted, or an
    error of its own raised after it: the stop came first)."""
    try:
        return await asyncio.wait_for(task.shape.call(task.rollout, values), timeout_s)
    except TimeoutError:
        raise PluginFailure(
            f"{task.plugin}: the rollout did not return within {timeout_s:g}s "
            "(ARTFLEET_PLUGIN_TIMEOUT_S)"
        ) from None
    except BudgetExhausted as stop:
        if session.ended is None:  # never let a BaseException of the plugin's own escape
            raise PluginFailure(f"{task.plugin}: the rollout raised BudgetExhausted") from stop
        return None
    except Exception:
        if session.ended is None:
            raise
        return None


def _take(trajectory: art.Trajectory, result: art.Trajectory) -> None:
    trajectory.messages_and_choices = list(result.messages_and_choices)
    trajectory.tools = result.tools
    trajectory.reward = result.reward
    trajectory.metrics.update(result.metrics)
    for key, value in result.metadata.items():
        trajectory.metadata.setdefault(key, value)  # the fleet's keys win
    trajectory.logs.extend(result.logs)


def _record(trajectory: art.Trajectory, session: PolicySession) -> None:
    """The policy versions that answered, and the completion limits the calls ran with
    (the smaller of the call's own and the job's `max_tokens`)."""
    versions = [v if v is not None else session.default_version for v in session.versions]
    first, last = (versions[0], versions[-1]) if versions else (session.default_version,) * 2
    trajectory.initial_policy_version, trajectory.final_policy_version = first, last
    trajectory.metadata["max_tokens"] = max(session.limits, default=session.budget.max_tokens)
    if session.asked:
        trajectory.metadata["max_tokens_asked"] = max(session.asked)


def _check(result: Any, session: PolicySession) -> None:
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
    foreign = sum(not session.sampled(choice) for choice in choices)
    if foreign:
        raise PluginFailure(
            f"{session.plugin}: {foreign} of {len(choices)} choices in the trajectory were not "
            "sampled through model.openai_client() in this episode (no tokens to train on)"
        )
