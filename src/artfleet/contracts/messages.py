"""Chat messages, tool calls, metric scalars and plain trajectories ⇄ proto, without ART.

The one source for how a message travels: the ART codec (`artfleet.contracts.codec`)
builds on it for trajectories with `Choice`s, and the API, whose image has neither ART
nor openai, uses it alone. Only protobuf, json and `artfleet.v1` are imported here.

A message keeps every key: the ones the proto names (role, string content, tool calls,
`tool_call_id`, `name`) travel in their fields, anything else (content parts, an explicit
`None`, unknown keys) in `extra_json`, so `message_from_proto(message_to_proto(m)) == m`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from artfleet.v1 import common_pb2 as pb

MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
_STRING_KEYS = ("tool_call_id", "name")


class MessageError(ValueError):
    """A message the proto cannot carry; `field` says where (`tool_calls[0].function`)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.message = message
        self.field = field


# ---------------------------------------------------------------- scalars
def scalar_to_proto(value: Any) -> pb.Scalar:
    if value is None:
        return pb.Scalar(null_value=True)
    if isinstance(value, bool):  # before int: bool is an int
        return pb.Scalar(bool_value=value)
    if isinstance(value, int):
        return pb.Scalar(int_value=value)
    if isinstance(value, float):
        return pb.Scalar(float_value=value)
    if isinstance(value, str):
        return pb.Scalar(string_value=value)
    raise TypeError(f"not a scalar ART keeps in metrics/metadata: {type(value).__name__}")


def scalar_from_proto(value: pb.Scalar) -> Any:
    kind = value.WhichOneof("value")
    return None if kind in (None, "null_value") else getattr(value, kind)


def scalars_to_proto(target: Any, values: Mapping[str, Any]) -> None:
    """Fills a proto map field (`metrics`, `metadata`) from a dict of scalars."""
    for key, value in values.items():
        target[key].CopyFrom(scalar_to_proto(value))


def scalars_from_proto(values: Mapping[str, pb.Scalar]) -> dict[str, Any]:
    return {key: scalar_from_proto(value) for key, value in values.items()}


# ---------------------------------------------------------------- tool calls
def _text(value: Any, field: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise MessageError(f"must be a string, not {type(value).__name__}", field)
    return value


def _tool_call_to_proto(call: Any, field: str) -> pb.ToolCall:
    if hasattr(call, "model_dump"):  # an OpenAI tool-call model, not a dict
        call = call.model_dump(mode="json")
    if not isinstance(call, Mapping):
        raise MessageError("must be an object", field)
    function = call.get("function") or {}
    if not isinstance(function, Mapping):
        raise MessageError("must be an object", f"{field}.function")
    return pb.ToolCall(
        id=_text(call.get("id"), f"{field}.id"),
        type=_text(call.get("type"), f"{field}.type") or "function",
        function_name=_text(function.get("name"), f"{field}.function.name"),
        function_arguments=_text(function.get("arguments"), f"{field}.function.arguments"),
    )


def tool_calls_to_proto(calls: Any) -> list[pb.ToolCall]:
    if isinstance(calls, (str, bytes, Mapping)) or not isinstance(calls, Iterable):
        raise MessageError("must be a list", "tool_calls")
    return [_tool_call_to_proto(call, f"tool_calls[{i}]") for i, call in enumerate(calls)]


def tool_calls_from_proto(calls: Iterable[pb.ToolCall]) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "type": c.type,
            "function": {"name": c.function_name, "arguments": c.function_arguments},
        }
        for c in calls
    ]


# ---------------------------------------------------------------- messages
def message_to_proto(
    message: Mapping[str, Any], keys: tuple[str, ...] = MESSAGE_KEYS
) -> pb.ChatMessage:
    """`keys`: which of MESSAGE_KEYS go in their own fields (a `Choice`'s message names
    fewer); the rest travel in `extra_json`. Raises MessageError naming the field."""
    out = pb.ChatMessage(role=str(message.get("role", "")))
    extra = {k: v for k, v in message.items() if k not in keys}
    content = message.get("content")
    if isinstance(content, str):
        out.content = content
    elif "content" in message:  # None or content parts: kept verbatim
        extra["content"] = content
    if message.get("tool_calls") is not None:
        out.has_tool_calls = True
        out.tool_calls.extend(tool_calls_to_proto(message["tool_calls"]))
    elif "tool_calls" in message:
        extra["tool_calls"] = None
    for key in _STRING_KEYS:
        if key in keys and message.get(key) is not None:
            setattr(out, key, _text(message[key], key))
        elif key in message:
            extra[key] = message[key]
    if extra:
        try:
            out.extra_json = json.dumps(extra, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise MessageError(f"not JSON: {exc}", ", ".join(sorted(extra))) from None
    return out


def message_from_proto(message: pb.ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role}
    if message.HasField("content"):
        out["content"] = message.content
    if message.has_tool_calls:
        out["tool_calls"] = tool_calls_from_proto(message.tool_calls)
    for key in _STRING_KEYS:
        if message.HasField(key):
            out[key] = getattr(message, key)
    if message.extra_json:
        out.update(json.loads(message.extra_json))
    return out


# ---------------------------------------------------------------- trajectories
def tools_to_json(tools: Any) -> str:
    return "" if tools is None else json.dumps(tools, sort_keys=True)


def tools_from_json(text: str) -> Any:
    return json.loads(text) if text else None


def trajectory_to_proto(
    messages: Iterable[Mapping[str, Any]], tools: Any = None, reward: float = 0.0
) -> pb.Trajectory:
    """A trajectory of plain messages (no `Choice`s, so no logprobs): what a client sends.
    A bad message raises MessageError whose field starts `messages[<i>].`."""
    items = []
    for i, message in enumerate(messages):
        try:
            items.append(pb.MessageOrChoice(message=message_to_proto(message)))
        except MessageError as exc:
            raise MessageError(exc.message, f"messages[{i}].{exc.field}") from None
    return pb.Trajectory(messages_and_choices=items, tools_json=tools_to_json(tools), reward=reward)


def messages_of(trajectory: pb.Trajectory) -> list[dict[str, Any]]:
    """OpenAI messages; an assistant turn (a Choice) becomes its message, no logprobs."""
    return [
        message_from_proto(item.choice.message if item.HasField("choice") else item.message)
        for item in trajectory.messages_and_choices
    ]


def trajectory_to_dict(trajectory: pb.Trajectory) -> dict[str, Any]:
    """`{messages, tools, reward, metrics, metadata}`, the shape the console reads. The
    policy that sampled the last turn (`final_policy_version`) is `metadata.policy_version`."""
    metadata = scalars_from_proto(trajectory.metadata)
    if trajectory.HasField("final_policy_version"):
        metadata["policy_version"] = trajectory.final_policy_version
    return {
        "messages": messages_of(trajectory),
        "tools": tools_from_json(trajectory.tools_json),
        "reward": trajectory.reward,
        "metrics": scalars_from_proto(trajectory.metrics),
        "metadata": metadata,
    }
