"""One episode: open a workspace, loop {policy → action → workspace → observation}, run the
scenario's check, close the workspace. I/O goes only through the two ports given."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from openai.types.chat.chat_completion import Choice

from artfleet.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_rollout import metrics
from artfleet_rollout.agent import (
    ExecResultLike,
    build_initial_messages,
    format_observation,
    parse_action,
    step_event,
)
from artfleet_rollout.environments import Scenario
from artfleet_rollout.ports import Policy, Workspace, Workspaces, WorkspaceSpec
from artfleet_rollout.repo_episode import finish_repo_task, repo_source
from artfleet_rollout.settings import RolloutSettings

log = logging.getLogger(__name__)


@dataclass
class EpisodeContext:
    task: rollout_pb2.GroupTask
    scenario: Scenario
    policy: Policy
    workspaces: Workspaces
    settings: RolloutSettings


@dataclass
class _Budget:
    """Stops before a turn whose prompt plus answer would overflow the context budget."""

    max_context_tokens: int
    max_tokens: int
    prompt_tokens: int = 0

    def exhausted(self) -> bool:
        return self.prompt_tokens + self.max_tokens > self.max_context_tokens


async def run_episode(ctx: EpisodeContext, index: int) -> tuple[art.Trajectory, pb.Episode]:
    trajectory = art.Trajectory(
        messages_and_choices=list(build_initial_messages(ctx.scenario)),  # type: ignore[arg-type]
        metadata={
            "scenario_id": ctx.scenario.id,
            "rollout_index": index,
            "policy": ctx.task.policy,
            "step": ctx.task.step,
        },
    )
    episode = pb.Episode()
    workspace = await ctx.workspaces.open(
        WorkspaceSpec(
            job_id=ctx.task.job_id,
            files=ctx.scenario.files,
            image=ctx.scenario.image,
            network=ctx.scenario.network,
            **repo_source(ctx.scenario.repo, ctx.scenario.image),
        )
    )
    try:
        episode.finish = await _agent_loop(ctx, workspace, trajectory, episode)
        if ctx.scenario.repo is not None:  # hidden F2P/P2P tests, after the agent is done
            trajectory.metrics.update(
                await finish_repo_task(
                    workspace, ctx.scenario.repo, episode, timeout_s=ctx.settings.tests_timeout_s
                )
            )
        if ctx.scenario.check:
            episode.check_passed = await workspace.check(
                ctx.scenario.check, timeout_s=ctx.settings.check_timeout_s
            )
            episode.check_ran = True
    finally:
        await workspace.close()
    episode.turns = len(episode.steps)
    trajectory.metrics.update(turns=episode.turns, check_passed=episode.check_passed)
    metrics.EPISODES.labels(episode.finish).inc()
    metrics.TURNS.observe(episode.turns)
    return trajectory.finish(), episode


async def _agent_loop(
    ctx: EpisodeContext, workspace: Workspace, trajectory: art.Trajectory, episode: pb.Episode
) -> str:
    budget = _Budget(ctx.task.max_context_tokens, ctx.task.max_tokens)
    for turn in range(1, ctx.task.max_turns + 1):
        if budget.exhausted():
            return "context"
        choice = await _ask_policy(ctx.policy, trajectory, budget)
        trajectory.messages_and_choices.append(choice)
        action = parse_action(choice.message.content or "")
        if action.kind == "submit":
            episode.steps.append(step_event(turn, action, None))
            return "submit"
        outcome = None
        if action.kind == "bash":
            outcome = await _exec(ctx, workspace, action.command)
            observation = format_observation(
                outcome.exit_code,
                _text(outcome.stdout),
                _text(outcome.stderr),
                outcome.timed_out,
                ctx.settings.observation_chars,
            )
        else:
            observation = action.error
        episode.steps.append(step_event(turn, action, outcome))
        trajectory.messages_and_choices.append({"role": "user", "content": observation})
    return "max_turns"


async def _ask_policy(policy: Policy, trajectory: art.Trajectory, budget: _Budget) -> Choice:
    start = time.perf_counter()
    turn = await policy.complete(trajectory.messages(), tools=trajectory.tools)
    metrics.MODEL_SECONDS.observe(time.perf_counter() - start)
    if turn.usage is not None:
        budget.prompt_tokens = turn.usage.context_tokens
    return turn.choice


async def _exec(ctx: EpisodeContext, workspace: Workspace, command: str) -> ExecResultLike:
    start = time.perf_counter()
    result = await workspace.exec(command, timeout_s=ctx.settings.exec_timeout_s)
    metrics.SANDBOX_SECONDS.observe(time.perf_counter() - start)
    return result


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
