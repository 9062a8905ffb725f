"""The `tools` kind: bash + editor + submit in a sandbox session; the scenario's check
decides success."""

from __future__ import annotations

from typing import Any

from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout.agents import tool_prompts
from artfleet_rollout.agents.context import EpisodeContext
from artfleet_rollout.agents.sandbox_tools import SandboxToolbox
from artfleet_rollout.agents.tool_loop import loop_options, run_tool_loop
from artfleet_rollout.agents.turns import canonical_tools
from artfleet_rollout.ports import WorkspaceSpec

KIND = "tools"


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
            ctx.policy, toolbox, trajectory, episode, loop_options(ctx, KIND, text_ends=False)
        )
        await toolbox.close()
        if scenario.check:
            episode.check_passed = await workspace.check(
                scenario.check, timeout_s=ctx.settings.check_timeout_s
            )
            episode.check_ran = True
    finally:
        await workspace.close()
