"""The `terminal` kind: open a workspace, loop {policy → action → workspace →
observation}, run the scenario's check (and a repo task's hidden tests), close the
workspace."""

from __future__ import annotations

import time
from typing import Any

from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout import metrics
from artfleet_rollout.agents.context import EpisodeContext
from artfleet_rollout.agents.terminal import (
    ExecResultLike,
    build_initial_messages,
    format_observation,
    parse_action,
    step_event,
)
from artfleet_rollout.agents.turns import Budget, Conversation, ask_policy
from artfleet_rollout.ports import ContextOverflow, Workspace, WorkspaceSpec
from artfleet_rollout.repo_episode import finish_repo_task, repo_source

KIND = "terminal"


async def run_terminal(
    ctx: EpisodeContext, trajectory: art.Trajectory, episode: pb.Episode
) -> None:
    messages: list[Any] = list(build_initial_messages(ctx.scenario))
    if ctx.task.task_prompt:
        messages[0] = {"role": "system", "content": ctx.task.task_prompt}
    trajectory.messages_and_choices = messages
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


async def _agent_loop(
    ctx: EpisodeContext, workspace: Workspace, trajectory: art.Trajectory, episode: pb.Episode
) -> str:
    budget = Budget(ctx.task.max_context_tokens, ctx.task.max_tokens)
    conversation = Conversation()
    for turn in range(1, ctx.task.max_turns + 1):
        if budget.exhausted():
            return "context"
        try:
            choice = await ask_policy(
                ctx.policy,
                trajectory,
                budget,
                default_version=ctx.task.policy_version,
                conversation=conversation,
            )
        except ContextOverflow:  # the policy counted a prompt past the context
            return "context"
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


async def _exec(ctx: EpisodeContext, workspace: Workspace, command: str) -> ExecResultLike:
    start = time.perf_counter()
    result = await workspace.exec(command, timeout_s=ctx.settings.exec_timeout_s)
    metrics.SANDBOX_SECONDS.observe(time.perf_counter() - start)
    return result


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
