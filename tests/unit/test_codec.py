"""Round trip: trajectory → proto → Redis bytes → back, then ART still trains on it."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from openai.types.chat.chat_completion import Choice

from artfleet import codec
from artfleet.art_compat import art
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


def test_scalar_rejects_non_scalars() -> None:
    with pytest.raises(TypeError):
        codec.scalar_to_proto([1])
    assert math.isnan(codec.scalar_from_proto(codec.scalar_to_proto(float("nan"))))
