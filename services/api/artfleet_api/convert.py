"""Trajectories between JSON and proto without importing ART (the API stays light: the
codec in artfleet.contracts.codec needs ART's types; plain messages need none)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from artfleet.v1 import common_pb2 as pb
from artfleet_api.models import Scalar, TrajectoryOut

_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def message_to_proto(message: Mapping[str, Any]) -> pb.ChatMessage:
    out = pb.ChatMessage(role=str(message.get("role", "")))
    extra = {k: v for k, v in message.items() if k not in _KEYS}
    content = message.get("content")
    if isinstance(content, str):
        out.content = content
    elif content is not None:
        extra["content"] = content
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out.has_tool_calls = True
        for call in calls:
            call = call if isinstance(call, dict) else {}
            function = call.get("function")
            function = function if isinstance(function, dict) else {}
            out.tool_calls.append(
                pb.ToolCall(
                    id=str(call.get("id") or ""),
                    type="function",
                    function_name=str(function.get("name") or ""),
                    function_arguments=str(function.get("arguments") or ""),
                )
            )
    for key in ("tool_call_id", "name"):
        if isinstance(message.get(key), str):
            setattr(out, key, message[key])
    if extra:
        out.extra_json = json.dumps(extra, sort_keys=True, default=str)
    return out


def message_from_proto(message: pb.ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role}
    if message.HasField("content"):
        out["content"] = message.content
    if message.has_tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": c.type,
                "function": {"name": c.function_name, "arguments": c.function_arguments},
            }
            for c in message.tool_calls
        ]
    for key in ("tool_call_id", "name"):
        if message.HasField(key):
            out[key] = getattr(message, key)
    if message.extra_json:
        out.update(json.loads(message.extra_json))
    return out


def trajectory_to_proto(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, reward: float
) -> pb.Trajectory:
    return pb.Trajectory(
        messages_and_choices=[pb.MessageOrChoice(message=message_to_proto(m)) for m in messages],
        tools_json="" if tools is None else json.dumps(tools),
        reward=reward,
    )


def _scalar(value: pb.Scalar) -> Scalar:
    kind = value.WhichOneof("value")
    if kind is None or kind == "null_value":
        return None
    result: Scalar = getattr(value, kind)
    return result


def trajectory_out(trajectory: pb.Trajectory) -> TrajectoryOut:
    messages = []
    for item in trajectory.messages_and_choices:
        if item.HasField("choice"):
            messages.append(message_from_proto(item.choice.message))
        else:
            messages.append(message_from_proto(item.message))
    metadata = {k: _scalar(v) for k, v in trajectory.metadata.items()}
    if trajectory.HasField("final_policy_version"):
        metadata.setdefault("policy_version", trajectory.final_policy_version)
    return TrajectoryOut(
        messages=messages,
        tools=json.loads(trajectory.tools_json) if trajectory.tools_json else None,
        reward=trajectory.reward,
        metrics={k: _scalar(v) for k, v in trajectory.metrics.items()},
        metadata=metadata,
    )
