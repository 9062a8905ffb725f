"""What the inference front refuses before vLLM sees it (artfleet_inference.requests)."""

from __future__ import annotations

import pytest

from artfleet_inference.requests import BadRequest, check_chat, check_completion, parse_body


@pytest.mark.parametrize(
    ("raw", "param"),
    [(b"{", "body"), (b"[]", "body"), (b"{}", "model"), (b'{"model": 3}', "model")],
)
def test_bodies_without_a_model_are_refused(raw: bytes, param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_body(raw)
    assert caught.value.param == param


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        (None, "messages"),
        ([], "messages"),
        (["hi"], "messages[0]"),
        ([{"role": "robot", "content": "x"}], "messages[0].role"),
        ([{"role": "user"}], "messages[0].content"),
        ([{"role": "user", "content": "a"}, {"role": "user", "content": 3}], "messages[1].content"),
        ([{"role": "tool", "content": "x", "tool_call_id": 5}], "messages[0].tool_call_id"),
    ],
)
def test_malformed_messages_name_the_field(messages: object, param: str) -> None:
    with pytest.raises(BadRequest) as caught:
        check_chat({"model": "m", "messages": messages})
    assert caught.value.param == param


def test_good_chats_pass() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    check_chat(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": [{"type": "text", "text": "u"}]},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "content": "out", "tool_call_id": "c1"},
            ],
        }
    )
    check_completion({"model": "m", "prompt": "p"})
    with pytest.raises(BadRequest):
        check_completion({"model": "m", "prompt": ""})
