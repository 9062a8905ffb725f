"""One episode of the environment's agent kind: the trajectory and the `Episode` record
made, the kind's runner (agents.kinds) run, both finished and counted. I/O goes only
through the ports in the context (and, for MCP, the environment's server)."""

from __future__ import annotations

from openai.types.chat.chat_completion import Choice

from artfleet.contracts.art_types import art
from artfleet.contracts.sampling import Sampling
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout import metrics
from artfleet_rollout.agents.context import AgentRun, EpisodeContext
from artfleet_rollout.agents.kinds import agent_kinds, agent_runner
from artfleet_rollout.environments import environment_sources
from artfleet_rollout.ports import ContextOverflow

__all__ = ["AgentRun", "EpisodeContext", "context_overflow", "run_episode"]


async def run_episode(ctx: EpisodeContext, index: int) -> tuple[art.Trajectory, pb.Episode]:
    trajectory = art.Trajectory(
        messages_and_choices=[],
        metadata={
            "scenario_id": ctx.scenario.id,
            "rollout_index": index,
            "policy": ctx.task.policy,
            "step": ctx.task.step,
            "agent": ctx.agent,
            # What sampled it (the policy sends these with every call): contracts/sampling.py.
            **Sampling(temperature=ctx.task.temperature).to_metadata(),
        },
    )
    # Which installed package produced it, for a plugin's episodes ("name version").
    for key, source in (
        ("agent_plugin", agent_kinds().get(ctx.agent)),
        ("environment_plugin", environment_sources().get(ctx.task.environment)),
    ):
        if source is not None and not source.bundled:
            trajectory.metadata[key] = str(source)
    episode = pb.Episode(agent=ctx.agent)
    try:
        await agent_runner(ctx.agent)(ctx, trajectory, episode)
    except Exception as exc:
        refused = context_overflow(exc)
        if refused is None:
            raise
        # The policy refused a conversation past the model's context: the budget's end,
        # as the kind's own check would have ended it; the turns so far are kept.
        episode.finish = "context"
        trajectory.logs.append(f"the policy refused: {refused}")
    episode.turns = sum(isinstance(item, Choice) for item in trajectory.messages_and_choices)
    trajectory.metrics.update(turns=episode.turns, check_passed=episode.check_passed)
    metrics.EPISODES.labels(episode.finish).inc()
    metrics.AGENT_EPISODES.labels(ctx.agent, episode.finish).inc()
    metrics.TURNS.observe(episode.turns)
    return trajectory.finish(), episode


def context_overflow(exc: BaseException) -> ContextOverflow | None:
    """The ContextOverflow an episode ended with, also from inside the exception groups of
    an MCP session's task group; None for any other exception."""
    if isinstance(exc, ContextOverflow):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        match, _ = exc.split(ContextOverflow)
        if match is not None:
            return context_overflow(match.exceptions[0])
    return None
