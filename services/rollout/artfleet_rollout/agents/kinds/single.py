"""The `single` kind: a system prompt and one user prompt, one answer; no sandbox session."""

from __future__ import annotations

from typing import Any

from artfleet.contracts.art_types import art
from artfleet.specs import answers
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout.agents.context import EpisodeContext
from artfleet_rollout.agents.turns import Budget, ask_policy, system_message

KIND = "single"
# Single-turn tasks without their own system prompt get this one.
SINGLE_DEFAULT_PROMPT = "Answer the question. End with the final answer."


async def run_single(ctx: EpisodeContext, trajectory: art.Trajectory, episode: pb.Episode) -> None:
    """A system prompt and one user prompt, one answer; no sandbox session."""
    scenario = ctx.scenario
    messages: list[Any] = [
        *system_message(ctx.task.task_prompt, scenario.system or SINGLE_DEFAULT_PROMPT),
        {"role": "user", "content": scenario.instruction},
    ]
    trajectory.messages_and_choices = messages
    budget = Budget(ctx.task.max_context_tokens, ctx.task.max_tokens)
    choice = await ask_policy(
        ctx.policy, trajectory, budget, default_version=ctx.task.policy_version
    )
    trajectory.messages_and_choices.append(choice)
    episode.steps.append(pb.StepEvent(turn=1, valid_format=bool(choice.message.content)))
    episode.finish = "answer"
    episode.expected_answer = scenario.answer
    if scenario.answer:
        # The task's own check (the answer_check scorer's defaults): evaluations count
        # success by it, whatever reward the job trains with.
        episode.check_passed = answers.task_check(choice.message.content or "", scenario.answer)
        episode.check_ran = True
