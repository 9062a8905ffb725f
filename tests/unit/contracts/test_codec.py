"""Round trip: trajectory → proto → Redis bytes → back, then ART still trains on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from openai.types.chat.chat_completion import Choice

from artfleet.contracts import codec
from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2

MakeChoice = Callable[[str, list[int], list[float]], Choice]


def _trajectory(make_choice: MakeChoice, reward: float) -> art.Trajectory:
    return art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            make_choice("hello", [1, 2, 3], [-0.25, -0.5, -0.75]),
            {"role": "tool", "content": "x", "tool_call_id": "c1"},
            {"role": "user", "content": [{"type": "text", "text": "parts"}]},
        ],
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"minimum": 1}}}],
        additional_histories=[
            art.trajectories.History(messages_and_choices=[{"role": "user", "content": "h"}])
        ],
        reward=reward,
        initial_policy_version=0,
        final_policy_version=None,
        metrics={"turns": 3, "ok": True, "ratio": 0.5},
        metadata={"scenario": "s1", "n": None, "k": 7},
        logs=["a", "b"],
    )


def test_trajectory_round_trip_is_lossless(make_choice: MakeChoice) -> None:
    original = _trajectory(make_choice, 0.75)
    wire = codec.trajectory_to_proto(original).SerializeToString()
    back = codec.trajectory_from_proto(common_pb2.Trajectory.FromString(wire))
    assert isinstance(back.messages_and_choices[2], Choice)
    assert back.model_dump() == original.model_dump()
    assert back.start_time == original.start_time
    assert type(back.metrics["turns"]) is int and type(back.metrics["ok"]) is bool
    assert back.metadata["n"] is None


def test_group_round_trip_keeps_trajectories_and_exceptions(make_choice: MakeChoice) -> None:
    group = art.TrajectoryGroup(
        [_trajectory(make_choice, 0.0), _trajectory(make_choice, 1.0)],
        metadata={"group": "g"},
        logs=["l"],
    )
    group.exceptions = [art.trajectories.PydanticException(type="E", message="m", traceback="t")]
    wire = codec.group_to_proto(group).SerializeToString()
    back = codec.group_from_proto(common_pb2.TrajectoryGroup.FromString(wire))
    assert len(back.trajectories) == 2
    assert [t.reward for t in back.trajectories] == [0.0, 1.0]
    assert back.exceptions[0].message == "m"
    assert back.metadata == {"group": "g"}


def _with_token_ids(choice: Choice, prompt_ids: list[int]) -> Choice:
    """The choice as vLLM returns it with `return_token_ids`: the ids in its extra fields."""
    assert choice.logprobs is not None and choice.logprobs.content is not None
    sampled = [int(e.token.removeprefix("token_id:")) for e in choice.logprobs.content]
    return Choice.model_validate(
        {**choice.model_dump(), "prompt_token_ids": prompt_ids, "token_ids": sampled}
    )


def test_token_ids_survive_and_match_the_logprob_tokens(make_choice: MakeChoice) -> None:
    original = _trajectory(make_choice, 0.5)
    choice = _with_token_ids(cast(Choice, original.messages_and_choices[2]), [11, 12, 13, 14])
    original.messages_and_choices[2] = choice
    message = codec.trajectory_to_proto(original)
    wire = message.messages_and_choices[2].choice
    assert wire.has_token_ids
    assert (list(wire.prompt_token_ids), list(wire.token_ids)) == ([11, 12, 13, 14], [1, 2, 3])
    back = codec.trajectory_from_proto(
        common_pb2.Trajectory.FromString(message.SerializeToString())
    )
    returned = back.messages_and_choices[2]
    assert isinstance(returned, Choice)
    assert returned.model_extra == {"prompt_token_ids": [11, 12, 13, 14], "token_ids": [1, 2, 3]}
    assert returned.logprobs is not None and returned.logprobs.content is not None
    from_logprobs = [int(e.token.removeprefix("token_id:")) for e in returned.logprobs.content]
    assert returned.model_extra["token_ids"] == from_logprobs
    assert back.model_dump() == original.model_dump()


def test_a_choice_without_token_ids_stays_without(make_choice: MakeChoice) -> None:
    message = codec.trajectory_to_proto(_trajectory(make_choice, 0.5))
    assert not message.messages_and_choices[2].choice.has_token_ids
    back = codec.trajectory_from_proto(message)
    returned = back.messages_and_choices[2]
    assert isinstance(returned, Choice)
    assert not returned.model_extra
    assert "token_ids" not in returned.model_dump()


def test_empty_sampled_ids_are_not_absent_ids(make_choice: MakeChoice) -> None:
    choice = Choice.model_validate(
        {**make_choice("", [], []).model_dump(), "prompt_token_ids": [4, 5], "token_ids": []}
    )
    back = codec.choice_from_proto(codec.choice_to_proto(choice))
    assert back.model_extra == {"prompt_token_ids": [4, 5], "token_ids": []}


def test_without_tokens_leaves_out_logprobs_and_token_ids(make_choice: MakeChoice) -> None:
    original = _trajectory(make_choice, 0.5)
    original.messages_and_choices[2] = _with_token_ids(
        cast(Choice, original.messages_and_choices[2]), [9, 9]
    )
    group = codec.group_to_proto(art.TrajectoryGroup([original]), tokens=False)
    wire = group.trajectories[0].messages_and_choices[2].choice
    assert not wire.has_logprobs and not wire.logprobs
    assert not wire.has_token_ids and not wire.token_ids and not wire.prompt_token_ids
    assert wire.message.content == "hello"
    back = codec.choice_from_proto(wire)
    assert back.logprobs is None and not back.model_extra
    # The default keeps them.
    assert codec.trajectory_to_proto(original).messages_and_choices[2].choice.has_token_ids


def test_tool_calls_and_tool_messages_round_trip_exactly(make_choice: MakeChoice) -> None:
    """The tool agents' turns: a sampled Choice that only calls tools (content None), two
    `tool` results with their ids, and a plain assistant message with a call (a demo)."""
    sampled = make_choice("", [5, 6], [-0.1, -0.2])
    calls = [
        {
            "id": "call_1_0",
            "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "ls"}'},
        },
        {"id": "call_1_1", "type": "function", "function": {"name": "submit", "arguments": "{}"}},
    ]
    dumped = sampled.model_dump()
    dumped["message"] = {"role": "assistant", "content": None, "tool_calls": calls}
    dumped["finish_reason"] = "tool_calls"
    choice = Choice.model_validate({**dumped, "prompt_token_ids": [1, 2], "token_ids": [5, 6]})
    items: list[Any] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [calls[1]]},
        {"role": "tool", "tool_call_id": "call_1_1", "content": "Submitted."},
        choice,
        {"role": "tool", "tool_call_id": "call_1_0", "content": "exit_code: 0"},
        {"role": "tool", "tool_call_id": "call_1_1", "content": "Submitted.", "name": "submit"},
    ]
    original = art.Trajectory(
        messages_and_choices=items,
        tools=[
            {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
        ],
        reward=1.0,
    )
    wire = codec.trajectory_to_proto(original).SerializeToString()
    back = codec.trajectory_from_proto(common_pb2.Trajectory.FromString(wire))
    assert back.model_dump() == original.model_dump()
    assert back.messages() == original.messages()
    got = back.messages_and_choices[3]
    assert isinstance(got, Choice) and got.message.tool_calls is not None
    assert [c.id for c in got.message.tool_calls] == ["call_1_0", "call_1_1"]
    assert got.model_extra == choice.model_extra
