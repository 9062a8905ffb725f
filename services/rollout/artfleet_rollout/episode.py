"""One episode: open a sandbox session, loop {model → action → sandbox → observation},
run the scenario's check, close the session. I/O goes through the two clients given."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from openai import AsyncOpenAI

from artfleet.art_types import art
from artfleet.sandbox_client import SandboxRouter
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2, sandbox_pb2, sandbox_pb2_grpc
from artfleet_rollout import metrics
from artfleet_rollout.agent import (
    build_initial_messages,
    format_observation,
    parse_action,
    step_event,
)
from artfleet_rollout.environments import Scenario
from artfleet_rollout.settings import RolloutSettings

log = logging.getLogger(__name__)


@dataclass
class EpisodeContext:
    task: rollout_pb2.GroupTask
    scenario: Scenario
    model: AsyncOpenAI
    sandbox: SandboxRouter
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
    session = await ctx.sandbox.create_session(
        sandbox_pb2.CreateSessionRequest(
            image=ctx.scenario.image,
            network=ctx.scenario.network,
            job_id=ctx.task.job_id,
            files=[
                sandbox_pb2.File(path=p, content=c.encode()) for p, c in ctx.scenario.files.items()
            ],
        ),
        deadline_s=120,
    )
    sandbox = _Pinned(session.stub, session.session_id)
    try:
        episode.finish = await _agent_loop(ctx, sandbox, trajectory, episode)
        await _run_check(ctx, sandbox, episode)
    finally:
        await session.close()
    episode.turns = len(episode.steps)
    trajectory.metrics.update(turns=episode.turns, check_passed=episode.check_passed)
    metrics.EPISODES.labels(episode.finish).inc()
    metrics.TURNS.observe(episode.turns)
    return trajectory.finish(), episode


@dataclass(frozen=True)
class _Pinned:
    """The session's replica (every call of a session goes there) and the session id."""

    stub: sandbox_pb2_grpc.SandboxStub
    session_id: str


async def _agent_loop(
    ctx: EpisodeContext, sandbox: _Pinned, trajectory: art.Trajectory, episode: pb.Episode
) -> str:
    budget = _Budget(ctx.task.max_context_tokens, ctx.task.max_tokens)
    for turn in range(1, ctx.task.max_turns + 1):
        if budget.exhausted():
            return "context"
        choice = await _ask_model(ctx, trajectory, budget)
        trajectory.messages_and_choices.append(choice)
        action = parse_action(choice.message.content or "")
        if action.kind == "submit":
            episode.steps.append(step_event(turn, action, None))
            return "submit"
        outcome = None
        if action.kind == "bash":
            outcome = await _exec(ctx, sandbox, action.command)
            observation = format_observation(
                outcome.exit_code,
                outcome.stdout.decode(errors="replace"),
                outcome.stderr.decode(errors="replace"),
                outcome.timed_out,
                ctx.settings.observation_chars,
            )
        else:
            observation = action.error
        episode.steps.append(step_event(turn, action, outcome))
        trajectory.messages_and_choices.append({"role": "user", "content": observation})
    return "max_turns"


async def _ask_model(ctx: EpisodeContext, trajectory: art.Trajectory, budget: _Budget) -> Any:
    start = time.perf_counter()
    completion = await ctx.model.chat.completions.create(
        model=ctx.task.policy,
        messages=trajectory.messages(),
        temperature=ctx.task.temperature,
        max_tokens=ctx.task.max_tokens,
        logprobs=True,
        timeout=ctx.settings.model_timeout_s,
    )
    metrics.MODEL_SECONDS.observe(time.perf_counter() - start)
    if completion.usage is not None:
        budget.prompt_tokens = completion.usage.prompt_tokens + completion.usage.completion_tokens
    return completion.choices[0]


async def _exec(ctx: EpisodeContext, sandbox: _Pinned, command: str) -> sandbox_pb2.ExecResult:
    start = time.perf_counter()
    result = await sandbox.stub.Exec(
        sandbox_pb2.ExecRequest(
            session_id=sandbox.session_id, command=command, timeout_s=ctx.settings.exec_timeout_s
        ),
        timeout=ctx.settings.exec_timeout_s + 30,
    )
    metrics.SANDBOX_SECONDS.observe(time.perf_counter() - start)
    return result


async def _run_check(ctx: EpisodeContext, sandbox: _Pinned, episode: pb.Episode) -> None:
    result = await sandbox.stub.Exec(
        sandbox_pb2.ExecRequest(
            session_id=sandbox.session_id,
            command=ctx.scenario.check,
            timeout_s=ctx.settings.check_timeout_s,
        ),
        timeout=ctx.settings.check_timeout_s + 30,
    )
    episode.check_ran = True
    episode.check_passed = result.exit_code == 0 and not result.timed_out
