"""What every agent kind shares: the context budget and one timed policy call."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, cast

from openai.types.chat.chat_completion import Choice

from artfleet.contracts.art_types import art
from artfleet_rollout import metrics
from artfleet_rollout.ports import Policy

# Where engines answer a reasoning parser's text beside `content`: vLLM 0.32 `reasoning`;
# earlier vLLM and other OpenAI-compatible servers `reasoning_content`.
REASONING_KEYS = ("reasoning", "reasoning_content")


@dataclass
class Budget:
    """Stops before a turn whose prompt plus answer would overflow the context budget."""

    max_context_tokens: int
    max_tokens: int
    prompt_tokens: int = 0

    def exhausted(self) -> bool:
        return self.prompt_tokens + self.max_tokens > self.max_context_tokens


async def ask_policy(
    policy: Policy,
    trajectory: art.Trajectory,
    budget: Budget,
    *,
    tool_choice: Any = None,
    default_version: int | None = None,
) -> Choice:
    start = time.perf_counter()
    messages = history(trajectory)
    if tool_choice is None:
        turn = await policy.complete(messages, tools=trajectory.tools)
    else:
        turn = await policy.complete(messages, tools=trajectory.tools, tool_choice=tool_choice)
    metrics.MODEL_SECONDS.observe(time.perf_counter() - start)
    # The policy versions the trainer's staleness rule reads (artfleet_trainer.jobs.pipeline):
    # the version the answer names, else the one served when the task was dispatched.
    version = turn.policy_version if turn.policy_version is not None else default_version
    if trajectory.initial_policy_version is None:
        trajectory.initial_policy_version = version
    trajectory.final_policy_version = version
    if turn.usage is not None:
        budget.prompt_tokens = turn.usage.context_tokens
    return turn.choice


def history(trajectory: art.Trajectory) -> list[Any]:
    """The conversation to send: ART's messages, plus each earlier answer's reasoning as the
    engine gave it. With a reasoning parser (vLLM's `--reasoning-parser`) `content` lacks
    the `<think>` block the model sampled, and ART's messages keep only `content`; without
    the reasoning the chat template renders an earlier turn of an agentic (tool) loop
    without its thinking, so the model sees a context it never wrote and its next prompt
    no longer extends the sampled ids. The engine's own key goes back (vLLM 0.32 answers
    `reasoning` and renders it as the template's `reasoning_content`)."""
    messages: list[Any] = trajectory.messages()
    # ART's messages() maps each item of messages_and_choices to one message, in order.
    for message, item in zip(messages, trajectory.messages_and_choices, strict=True):
        if isinstance(item, Choice):
            extra = item.message.model_extra or {}
            message.update({k: extra[k] for k in REASONING_KEYS if extra.get(k) is not None})
    return messages


def system_message(task_prompt: str, default: str) -> list[dict[str, str]]:
    """The job's task_prompt wins over the environment's prompt; none at all = no message."""
    text = task_prompt or default
    return [{"role": "system", "content": text}] if text else []


def canonical_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools as training will render them. The chat template writes the JSON in key
    order; the trajectory's tools come back through the codec (protobuf Structs: keys
    sorted) and ART's validation (its tool types' field order), so sampling must see that
    same order, or the policy trains on a prompt it never saw."""
    ordered = json.loads(json.dumps(tools, sort_keys=True))
    validated = art.Trajectory(messages_and_choices=[], tools=ordered).tools or []
    return cast(list[dict[str, Any]], json.loads(json.dumps(validated)))
