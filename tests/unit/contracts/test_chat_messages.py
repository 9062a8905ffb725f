"""The shared chat-messages check: what both engines' fronts accept and refuse."""

from __future__ import annotations

import pytest

from artfleet.contracts.chat_messages import MessageError, check_messages


def test_text_parts_are_joined_and_other_fields_kept() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    out = check_messages([{"role": "user", "content": parts, "name": "u"}])
    assert out == [{"role": "user", "content": "ab", "name": "u"}]


def test_tool_call_only_assistant_turn_gets_empty_content() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    out = check_messages([{"role": "assistant", "content": None, "tool_calls": [call]}])
    assert out[0]["content"] == ""


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ("hi", "messages"),
        ([1], "messages[0]"),
        ([{"role": "wizard", "content": "x"}], "messages[0].role"),
        ([{"role": "user", "content": "x"}, {"role": "user"}], "messages[1].content"),
        ([{"role": "user", "content": 3}], "messages[0].content"),
        ([{"role": "user", "content": [{"type": "image_url"}]}], "messages[0].content"),
        ([{"role": "tool", "content": "x", "tool_call_id": 7}], "messages[0].tool_call_id"),
    ],
)
def test_bad_messages_name_the_field(messages: object, param: str) -> None:
    with pytest.raises(MessageError) as err:
        check_messages(messages)
    assert err.value.param == param
