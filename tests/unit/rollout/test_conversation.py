"""An episode's history as sent each turn: each message converted and encoded once, the
same messages `history()` makes, and anything rewritten behind its back converted again."""

from __future__ import annotations

import json
from typing import Any

from openai.types.chat.chat_completion import Choice

from artfleet.contracts.art_types import art
from artfleet_rollout.agents.turns import Conversation, history
from artfleet_rollout.ports import EncodedList, encode

TOOLS: list[Any] = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]


def _choice(turn: int, reasoning: str = "") -> Choice:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{turn}",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    if reasoning:
        message["reasoning"] = reasoning
    return Choice.model_validate(
        {"index": 0, "finish_reason": "tool_calls", "message": message, "logprobs": None}
    )


def _trajectory() -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "s"},
            {"role": "user", "content": "task é"},
        ],
        tools=TOOLS,
    )


def _sent(encoded: EncodedList) -> list[Any]:
    return [json.loads(text) for text in encoded.encoded]


def test_each_turn_converts_only_its_new_messages() -> None:
    trajectory, conversation = _trajectory(), Conversation()
    first = conversation.messages(trajectory)
    assert list(first) == history(trajectory) == _sent(first)
    trajectory.messages_and_choices.append(_choice(1, reasoning="hm"))
    trajectory.messages_and_choices.append(
        {"role": "tool", "tool_call_id": "call_1", "content": "x"}
    )
    second = conversation.messages(trajectory)
    assert list(second) == history(trajectory) == _sent(second)
    assert second[2]["reasoning"] == "hm"  # as history() sends a reasoning parser's text
    # The earlier messages' JSON texts are the very objects made at the first turn.
    assert all(a is b for a, b in zip(first.encoded, second.encoded[:2], strict=True))
    assert first.encoded == [encode(m) for m in history(_trajectory())]  # unchanged by turn 2


def test_a_rewritten_history_is_converted_again() -> None:
    trajectory, conversation = _trajectory(), Conversation()
    conversation.messages(trajectory)
    trajectory.messages_and_choices[1]["content"] = "changed in place"  # type: ignore[index]
    assert _sent(conversation.messages(trajectory)) == history(trajectory)
    parts = [{"type": "text", "text": "a"}]
    message: Any = {"role": "user", "content": parts}
    trajectory.messages_and_choices.append(message)
    conversation.messages(trajectory)
    parts[0]["text"] = "b"  # nested, in place
    assert _sent(conversation.messages(trajectory)) == history(trajectory)
    trajectory.messages_and_choices[0] = {"role": "system", "content": "replaced"}
    assert _sent(conversation.messages(trajectory)) == history(trajectory)
    del trajectory.messages_and_choices[1:]
    assert _sent(conversation.messages(trajectory)) == history(trajectory)


def test_tools_are_encoded_once_and_again_when_they_change() -> None:
    trajectory, conversation = _trajectory(), Conversation()
    tools = conversation.tools(trajectory)
    assert tools is not None and list(tools) == TOOLS and _sent(tools) == TOOLS
    again = conversation.tools(trajectory)
    assert again is not None and again.encoded[0] is tools.encoded[0]
    trajectory.tools[0]["function"]["name"] = "sh"  # type: ignore[index]
    changed = conversation.tools(trajectory)
    assert changed is not None and _sent(changed)[0]["function"]["name"] == "sh"
    trajectory.tools = None
    assert conversation.tools(trajectory) is None
