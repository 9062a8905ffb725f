"""The tools the policy is asked with render exactly as training renders them: the same
key order after the trajectory's trip through the codec and ART's validation."""

from __future__ import annotations

import json
from typing import Any

from artfleet.contracts import codec
from artfleet.contracts.art_types import art
from artfleet_rollout.agents.turns import canonical_tools

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "it"}},
                "required": ["command"],
            },
        },
    }
]


def test_canonical_tools_survive_the_codec_in_the_same_key_order() -> None:
    asked = canonical_tools(TOOLS)
    trajectory = art.Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}])
    trajectory.tools = asked  # type: ignore[assignment]
    trained = codec.trajectory_from_proto(codec.trajectory_to_proto(trajectory)).tools
    assert json.dumps(trained) == json.dumps(asked)  # order included: the template sees it
    assert json.loads(json.dumps(asked)) == TOOLS  # same content


def test_the_raw_order_would_not_survive() -> None:
    trajectory = art.Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}])
    trajectory.tools = TOOLS  # type: ignore[assignment]
    trained = codec.trajectory_from_proto(codec.trajectory_to_proto(trajectory)).tools
    assert json.dumps(trained) != json.dumps(TOOLS)
