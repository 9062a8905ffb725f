"""One episode of the environment's agent kind: the trajectory and the `Episode` record
made, the kind's runner (agents.kinds) run, both finished and counted. I/O goes only
through the ports in the context (and, for MCP, the environment's server)."""

from __future__ import annotations

from openai.types.chat.chat_completion import Choice

from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout import metrics
from artfleet_rollout.agents.context import AgentRun, EpisodeContext
from artfleet_rollout.agents.kinds import agent_kinds, agent_runner
from artfleet_rollout.environments import environment_sources

__all__ = ["AgentRun", "EpisodeContext", "run_episode"]


async def run_episode(ctx: EpisodeContext, index: int) -> tuple[art.Trajectory, pb.Episode]:
    trajectory = art.Trajectory(
        messages_and_choices=[],
        metadata={
            "scenario_id": ctx.scenario.id,
            "rollout_index": index,
            "policy": ctx.task.policy,
            "step": ctx.task.step,
            "agent": ctx.agent,
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
    await agent_runner(ctx.agent)(ctx, trajectory, episode)
    episode.turns = sum(isinstance(item, Choice) for item in trajectory.messages_and_choices)
    trajectory.metrics.update(turns=episode.turns, check_passed=episode.check_passed)
    metrics.EPISODES.labels(episode.finish).inc()
    metrics.AGENT_EPISODES.labels(ctx.agent, episode.finish).inc()
    metrics.TURNS.observe(episode.turns)
    return trajectory.finish(), episode
