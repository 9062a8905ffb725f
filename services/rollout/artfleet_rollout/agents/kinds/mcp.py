"""The `mcp` kind: one MCP session per episode: setup, the tool loop, then `evaluate` in
the same session."""

from __future__ import annotations

from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout.agents import tool_prompts
from artfleet_rollout.agents.context import EpisodeContext
from artfleet_rollout.agents.mcp_env import (
    McpEndpoint,
    McpFailure,
    open_environment,
    with_job_server,
)
from artfleet_rollout.agents.tool_loop import loop_options, run_tool_loop
from artfleet_rollout.agents.turns import canonical_tools

KIND = "mcp"


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
            ctx.policy, environment, trajectory, episode, loop_options(ctx, KIND, text_ends=True)
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
