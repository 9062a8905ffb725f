"""What every agent kind shares: the context budget and one timed policy call."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from openai.types.chat.chat_completion import Choice

from artfleet.contracts.art_types import art
from artfleet_rollout import metrics
from artfleet_rollout.ports import EncodedList, Policy, encode

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
        return self.passed_by(self.prompt_tokens, self.max_tokens)

    def passed_by(self, prompt_tokens: int, max_tokens: int) -> bool:
        """Whether a prompt of `prompt_tokens` plus `max_tokens` to sample overflows it."""
        return prompt_tokens + max_tokens > self.max_context_tokens


async def ask_policy(
    policy: Policy,
    trajectory: art.Trajectory,
    budget: Budget,
    *,
    tool_choice: Any = None,
    default_version: int | None = None,
    conversation: Conversation | None = None,
) -> Choice:
    """One policy call on the trajectory's history. A loop of turns passes its episode's
    `conversation`, so each message is converted and encoded once, not every turn."""
    start = time.perf_counter()
    if conversation is None:
        messages: Sequence[Any] = history(trajectory)
        tools: Sequence[Any] | None = trajectory.tools
    else:
        messages, tools = conversation.messages(trajectory), conversation.tools(trajectory)
    if tool_choice is None:
        turn = await policy.complete(messages, tools=tools)
    else:
        turn = await policy.complete(messages, tools=tools, tool_choice=tool_choice)
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
    return [_message(item) for item in trajectory.messages_and_choices]


def _message(item: Any) -> Any:
    """One item of `messages_and_choices` as ART's `messages()` sends it (its own
    conversion, one item at a time), with a Choice's reasoning (see `history`)."""
    message: dict[str, Any] = dict(art.trajectories.get_messages([item])[0])
    if isinstance(item, Choice):
        extra = item.message.model_extra or {}
        message.update({k: extra[k] for k in REASONING_KEYS if extra.get(k) is not None})
    return message


class Conversation:
    """An episode's history as sent each turn, each message converted and encoded once.

    The history only grows between turns; each call checks that the items it converted
    are still there, the same objects with the same content (a dict compared with a deep
    copy taken then: its strings are shared, so unchanged ones compare by pointer), and
    converts again from the first that is not. So a turn costs its new messages, not the
    whole history again."""

    def __init__(self) -> None:
        self._items: list[Any] = []  # the trajectory's items converted so far
        self._copies: list[Any] = []  # a dict item's content then
        self._messages: list[Any] = []
        self._encoded: list[bytes] = []
        self._tools: tuple[Any, Any, EncodedList] | None = None  # (list, copy, encoded)

    def messages(self, trajectory: art.Trajectory) -> EncodedList:
        items = trajectory.messages_and_choices
        keep = self._unchanged(items)
        for kept in (self._items, self._copies, self._messages, self._encoded):
            del kept[keep:]
        for item in items[keep:]:
            message = _message(item)
            self._items.append(item)
            self._copies.append(copy.deepcopy(item) if isinstance(item, dict) else None)
            self._messages.append(message)
            self._encoded.append(encode(message))
        return EncodedList(self._messages, self._encoded)

    def _unchanged(self, items: Sequence[Any]) -> int:
        """How many leading items are the ones converted before, unchanged."""
        for i, (item, seen, then) in enumerate(zip(items, self._items, self._copies, strict=False)):
            if item is not seen or (then is not None and item != then):
                return i
        return min(len(items), len(self._items))

    def tools(self, trajectory: art.Trajectory) -> EncodedList | None:
        tools = trajectory.tools
        if not tools:
            return None
        cached = self._tools
        if cached is None or cached[0] is not tools or cached[1] != tools:
            snapshot = json.loads(json.dumps(tools))  # the content then, nested included
            self._tools = cached = (
                tools,
                snapshot,
                EncodedList(tools, [encode(tool) for tool in tools]),
            )
        return EncodedList(cached[2], cached[2].encoded)


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
