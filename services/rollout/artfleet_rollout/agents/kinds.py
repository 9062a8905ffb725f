"""The agent kinds beyond the terminal agent: `tools`, `mcp` and `single`.

Each fills the episode's trajectory and `Episode` record; `episode.run_episode` picks one by
the environment's `agent`. The job's `task_prompt` replaces each kind's system prompt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from artfleet.contracts.art_types import art
from artfleet.specs import answers
from artfleet.v1 import common_pb2 as pb

from . import tool_prompts
from .mcp_env import McpEndpoint, McpFailure, open_environment, with_job_server
from .sandbox_tools import SandboxToolbox
from .tool_loop import LoopOptions, run_tool_loop
from .turns import Budget, ask_policy, canonical_tools, system_message

if TYPE_CHECKING:
    from artfleet_rollout.episode import EpisodeContext

from artfleet_rollout.ports import WorkspaceSpec

# Single-turn tasks without their own system prompt get this one.
SINGLE_DEFAULT_PROMPT = "Answer the question. End with the final answer."


def _options(ctx: EpisodeContext, agent: str, *, text_ends: bool) -> LoopOptions:
    return LoopOptions(
        agent=agent,
        max_turns=ctx.task.max_turns,
        max_tokens=ctx.task.max_tokens,
        max_context_tokens=ctx.task.max_context_tokens,
        result_chars=ctx.settings.tool_result_chars,
        tool_choice=ctx.tool_choice,
        text_ends=text_ends,
        policy_version=ctx.task.policy_version,
    )


async def run_tools(ctx: EpisodeContext, trajectory: art.Trajectory, episode: pb.Episode) -> None:
    """bash + editor + submit in a sandbox session; the scenario's check decides success."""
    scenario = ctx.scenario
    workspace = await ctx.workspaces.open(
        WorkspaceSpec(
            job_id=ctx.task.job_id,
            files=scenario.files,
            image=scenario.image,
            network=scenario.network,
        )
    )
    try:
        toolbox = SandboxToolbox(workspace, exec_timeout_s=ctx.settings.exec_timeout_s)
        tools = canonical_tools(toolbox.tools())
        trajectory.tools = tools  # type: ignore[assignment]
        files = ", ".join(sorted(scenario.files)) or "(none)"
        messages: list[Any] = [
            {
                "role": "system",
                "content": tool_prompts.system_text("tools", tools, ctx.task.task_prompt),
            },
            *tool_prompts.shell_demonstration(),
            {"role": "user", "content": f"Task: {scenario.instruction}\nFiles: {files}"},
        ]
        trajectory.messages_and_choices = messages
        episode.finish = await run_tool_loop(
            ctx.policy, toolbox, trajectory, episode, _options(ctx, "tools", text_ends=False)
        )
        await toolbox.close()
        if scenario.check:
            episode.check_passed = await workspace.check(
                scenario.check, timeout_s=ctx.settings.check_timeout_s
            )
            episode.check_ran = True
    finally:
        await workspace.close()


async def run_mcp(ctx: EpisodeContext, trajectory: art.Trajectory, episode: pb.Episode) -> None:
    """One MCP session: setup, the tool loop, then `evaluate` in the same session."""
    if ctx.scenario.mcp is None:
        raise McpFailure(f"scenario {ctx.scenario.id!r} has no MCP server configured")
    task = with_job_server(ctx.scenario.mcp, ctx.task.mcp_config)
    endpoint = McpEndpoint(ctx.settings.sandbox_target, ctx.token, ctx.settings.mcp_timeout_s)
    async with open_environment(task, endpoint) as environment:
        setup_text = await environment.start()
        tools = canonical_tools(environment.tools())
        trajectory.tools = tools  # type: ignore[assignment]
        system = ctx.task.task_prompt or ctx.scenario.system
        trajectory.messages_and_choices = tool_prompts.mcp_messages(
            tools, system, setup_text, ctx.scenario.instruction
        )
        episode.finish = await run_tool_loop(
            ctx.policy, environment, trajectory, episode, _options(ctx, "mcp", text_ends=True)
        )
        evaluation = await environment.evaluate()
    episode.evaluated = True
    episode.evaluate_reward = evaluation.reward
    if evaluation.done is not None:
        episode.evaluate_done = evaluation.done
    episode.evaluate_text = evaluation.text[:500]
    trajectory.metrics["mcp_evaluate_reward"] = evaluation.reward
    # Success, as evaluations count it: the environment's full reward (2048: the target
    # tile reached; the calculator: the right answer).
    episode.check_ran = True
    episode.check_passed = evaluation.reward >= 1.0


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
