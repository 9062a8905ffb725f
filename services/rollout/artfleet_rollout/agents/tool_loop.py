"""The OpenAI function-calling loop shared by the tool agent and the MCP agent.

Each turn: ask the policy with the toolbox's tools, run every call the turn made, append
one `tool` message per call (with its `tool_call_id`). A malformed call (unknown tool, bad
arguments) and an over-long result are results the model reads, and invalid-format steps
for process rewards; they never end the episode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout import metrics
from artfleet_rollout.agents.context import EpisodeContext
from artfleet_rollout.agents.terminal import Action, step_event, truncate_middle
from artfleet_rollout.ports import ContextOverflow, Policy, Toolbox, ToolResult

from .toolcalls import RequestedCall, requested_calls
from .turns import Budget, Conversation, ask_policy

UNKNOWN_TOOL = "(unknown)"
NO_CALL_HELP = (
    "You did not call a tool. Reply with exactly one tool call, for example:\n"
    '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>\n'
    "When the task is done, call submit."
)


@dataclass(frozen=True)
class LoopOptions:
    agent: str  # the metrics' agent label
    max_turns: int
    max_tokens: int
    max_context_tokens: int
    result_chars: int  # a longer tool result is cut (and counts as an invalid step)
    tool_choice: Any = None
    # HUD agents stop when the model answers without a tool call; the tool agent asks again.
    text_ends: bool = False
    policy_version: int | None = None  # served at dispatch; used where an answer names none


def loop_options(ctx: EpisodeContext, agent: str, *, text_ends: bool) -> LoopOptions:
    """The loop's options for an episode of `agent` (the task's limits and tool_choice)."""
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


async def run_tool_loop(
    policy: Policy,
    toolbox: Toolbox,
    trajectory: art.Trajectory,
    episode: pb.Episode,
    options: LoopOptions,
) -> str:
    """Runs turns until `submit`, a text answer (`text_ends`), the turn or context limit;
    returns the finish reason."""
    budget = Budget(options.max_context_tokens, options.max_tokens)
    conversation = Conversation()
    known = {tool["function"]["name"] for tool in toolbox.tools()}
    for turn in range(1, options.max_turns + 1):
        if budget.exhausted():
            return "context"
        try:
            choice = await ask_policy(
                policy,
                trajectory,
                budget,
                tool_choice=options.tool_choice,
                default_version=options.policy_version,
                conversation=conversation,
            )
        except ContextOverflow:  # the policy counted a prompt past the context
            return "context"
        trajectory.messages_and_choices.append(choice)
        calls = requested_calls(choice, turn)
        if not calls:
            if options.text_ends:
                episode.steps.append(pb.StepEvent(turn=turn, valid_format=True, is_submit=True))
                return "answer"
            episode.steps.append(pb.StepEvent(turn=turn, valid_format=False))
            trajectory.messages_and_choices.append({"role": "user", "content": NO_CALL_HELP})
            continue
        done = False
        for call in calls:
            result = await _run_call(toolbox, call, known, options)
            label = call.name if call.name in known else UNKNOWN_TOOL
            episode.tool_calls[label] += 1
            metrics.TOOL_CALLS.labels(options.agent, label, str(result.ok).lower()).inc()
            episode.steps.append(_step(turn, result))
            trajectory.messages_and_choices.append(
                {"role": "tool", "tool_call_id": call.id, "content": result.text}
            )
            done = done or result.done
        if done:
            return "submit"
    return "max_turns"


async def _run_call(
    toolbox: Toolbox, call: RequestedCall, known: set[str], options: LoopOptions
) -> ToolResult:
    if call.name not in known:
        what = f"unknown tool {call.name!r}" if call.name else f"not a tool call: {call.arguments}"
        return ToolResult(f"Error: {what[:300]}. Tools: {', '.join(sorted(known))}.", ok=False)
    result = await toolbox.call(call.name, call.arguments)
    if len(result.text) <= options.result_chars:
        return result
    cut = truncate_middle(result.text, options.result_chars)
    note = f"\n[output cut to {options.result_chars} of {len(result.text)} characters]"
    return ToolResult(cut + note, False, result.done, result.command, result.exec)


def _step(turn: int, result: ToolResult) -> pb.StepEvent:
    if result.exec is not None:
        # A shell command ran: the terminal agent's process facts apply.
        event = step_event(turn, Action("bash", command=result.command), result.exec)
        event.valid_format = result.ok
        return event
    return pb.StepEvent(turn=turn, valid_format=result.ok, is_submit=result.done)
