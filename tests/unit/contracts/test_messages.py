"""Plain messages, tool calls and scalars ⇄ proto without ART (`artfleet.contracts.messages`):
every key comes back, a value the proto cannot carry is an error naming its field, and a
trajectory built from plain dicts reads back the same through the ART codec."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
from openai.types.chat.chat_completion import Choice

from artfleet.contracts import codec, messages
from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb

CALLS = [
    {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}},
    {"id": "c2", "type": "custom", "function": {"name": "submit", "arguments": ""}},
]
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "parts"}]},
    {"role": "assistant", "content": None, "tool_calls": CALLS},
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt", "name": "bash"},
    {"role": "tool", "tool_call_id": "c2", "content": {"ok": True}},
    {"role": "assistant", "content": "done", "tool_calls": None, "refusal": None, "x": [1]},
    {"role": "user", "content": 3, "name": None},
]


def _wire(message: dict[str, Any]) -> pb.ChatMessage:
    return pb.ChatMessage.FromString(messages.message_to_proto(message).SerializeToString())


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: f"{m['role']}:{sorted(m)}")
def test_a_message_comes_back_with_every_key(message: dict[str, Any]) -> None:
    assert messages.message_from_proto(_wire(message)) == message


def test_tool_calls_travel_in_their_fields_with_their_type() -> None:
    wire = _wire(MESSAGES[2])
    assert wire.has_tool_calls and not wire.HasField("content")
    assert [(c.id, c.type, c.function_name) for c in wire.tool_calls] == [
        ("c1", "function", "bash"),
        ("c2", "custom", "submit"),
    ]
    assert wire.extra_json == '{"content": null}'  # an explicit None survives
    # A call without a type is a function call; an empty list is still a list.
    bare = _wire({"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]})
    assert bare.tool_calls[0].type == "function" and bare.tool_calls[0].id == ""
    assert messages.message_from_proto(_wire({"role": "assistant", "tool_calls": []})) == {
        "role": "assistant",
        "tool_calls": [],
    }


def test_a_choices_message_keeps_tool_call_id_and_name_in_its_extras() -> None:
    message = {"role": "assistant", "content": "hi", "name": "bot"}
    wire = messages.message_to_proto(message, ("role", "content", "tool_calls"))
    assert not wire.HasField("name") and wire.extra_json == '{"name": "bot"}'
    assert messages.message_from_proto(wire) == message


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "assistant", "tool_calls": "f()"}, "tool_calls"),
        ({"role": "assistant", "tool_calls": {"id": "c"}}, "tool_calls"),
        ({"role": "assistant", "tool_calls": [CALLS[0], 3]}, "tool_calls[1]"),
        ({"role": "assistant", "tool_calls": [{"function": "f"}]}, "tool_calls[0].function"),
        ({"role": "assistant", "tool_calls": [{"id": 1}]}, "tool_calls[0].id"),
        (
            {"role": "assistant", "tool_calls": [{"function": {"arguments": {"a": 1}}}]},
            "tool_calls[0].function.arguments",
        ),
        ({"role": "tool", "content": "x", "tool_call_id": 7}, "tool_call_id"),
        ({"role": "user", "content": "x", "name": ["n"]}, "name"),
        ({"role": "user", "content": {1, 2}}, "content"),
    ],
)
def test_what_the_proto_cannot_carry_is_an_error_naming_the_field(
    message: dict[str, Any], field: str
) -> None:
    with pytest.raises(messages.MessageError) as caught:
        messages.message_to_proto(message)
    assert caught.value.field == field


def test_a_plain_trajectorys_error_names_the_message() -> None:
    bad = {"role": "assistant", "tool_calls": [{"id": 1}]}
    with pytest.raises(messages.MessageError) as caught:
        messages.trajectory_to_proto([MESSAGES[0], bad])
    assert caught.value.field == "messages[1].tool_calls[0].id"


@pytest.mark.parametrize("value", [None, True, False, 0, -(2**62), 1.5, "", "s"])
def test_scalars_come_back_with_their_type(value: Any) -> None:
    wire = pb.Scalar.FromString(messages.scalar_to_proto(value).SerializeToString())
    back = messages.scalar_from_proto(wire)
    assert back == value and type(back) is type(value)


def test_scalar_rejects_non_scalars() -> None:
    with pytest.raises(TypeError):
        messages.scalar_to_proto([1])
    assert math.isnan(messages.scalar_from_proto(messages.scalar_to_proto(float("nan"))))
    assert messages.scalar_from_proto(pb.Scalar()) is None  # unset reads as null


def test_a_plain_trajectory_reads_back_the_same_through_the_art_codec() -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    wire = messages.trajectory_to_proto(MESSAGES, tools, 0.25).SerializeToString()
    back = codec.trajectory_from_proto(pb.Trajectory.FromString(wire))
    assert back.messages_and_choices == MESSAGES
    assert (back.tools, back.reward) == (tools, 0.25)


def test_a_trajectory_as_a_plain_dict(
    make_choice: Callable[[str, list[int], list[float]], Choice],
) -> None:
    items: list[Any] = [MESSAGES[1], make_choice("hi", [1], [-0.5]), MESSAGES[3]]
    trajectory = art.Trajectory(
        messages_and_choices=items,
        tools=None,
        reward=0.5,
        final_policy_version=4,
        metrics={"turns": 2, "ok": True},
        metadata={"scenario_id": "s1", "policy_version": 1, "n": None},
    )
    plain = messages.trajectory_to_dict(codec.trajectory_to_proto(trajectory))
    assert plain == {
        "messages": [MESSAGES[1], {"role": "assistant", "content": "hi"}, MESSAGES[3]],
        "tools": None,
        "reward": 0.5,
        "metrics": {"turns": 2, "ok": True},
        # The version that sampled the last turn is the trajectory's own field.
        "metadata": {"scenario_id": "s1", "policy_version": 4, "n": None},
    }
    unversioned = messages.trajectory_to_dict(messages.trajectory_to_proto(MESSAGES[:1]))
    assert unversioned["metadata"] == {} and unversioned["messages"] == MESSAGES[:1]
