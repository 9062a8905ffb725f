"""`art.Trajectory` / `art.TrajectoryGroup` ⇄ proto ⇄ bytes, losslessly.

A plain JSON round trip turns assistant `Choice`s into dicts, which ART then refuses to
train on, and `TrajectoryGroup.model_validate` silently yields no trajectories: this codec
rebuilds real `Choice` objects (with token logprobs) and real groups.

vLLM's exact token ids (`return_token_ids`) travel too: an OpenAI `Choice` keeps them in
its extra fields (`choice.model_extra["prompt_token_ids"]`, `["token_ids"]`), where ART
after 0.5.18 reads them; they come back there, and a choice without them stays without.

Only ART's types are needed here (`artfleet.contracts.art_types`): encoding a trajectory never
imports torch. Plain messages, tool calls and scalars are `artfleet.contracts.messages`'s
(no ART there: the API uses it alone); this module adds what needs ART and openai.
"""

from __future__ import annotations

from typing import Any, cast

from google.protobuf.timestamp_pb2 import Timestamp
from openai.types.chat.chat_completion import Choice as OpenAIChoice

from artfleet.contracts.art_types import art
from artfleet.contracts.messages import (
    message_from_proto,
    message_to_proto,
    scalars_from_proto,
    scalars_to_proto,
    tools_from_json,
    tools_to_json,
)
from artfleet.v1 import common_pb2 as pb

# A `Choice`'s message has no tool_call_id or name of its own: kept in its extra JSON.
_CHOICE_MESSAGE_KEYS = ("role", "content", "tool_calls")


# ---------------------------------------------------------------- choices
def _logprobs_to_proto(choice: OpenAIChoice) -> list[pb.TokenLogprob]:
    content = choice.logprobs.content if choice.logprobs else None
    out = []
    for entry in content or []:
        top = [
            pb.TopLogprob(token=t.token, logprob=t.logprob, bytes=bytes(t.bytes or []))
            if t.bytes is not None
            else pb.TopLogprob(token=t.token, logprob=t.logprob)
            for t in entry.top_logprobs
        ]
        item = pb.TokenLogprob(token=entry.token, logprob=entry.logprob, top_logprobs=top)
        if entry.bytes is not None:
            item.bytes = bytes(entry.bytes)
        out.append(item)
    return out


def _logprob_entry(entry: pb.TokenLogprob) -> dict[str, Any]:
    return {
        "token": entry.token,
        "logprob": entry.logprob,
        "bytes": list(entry.bytes) if entry.HasField("bytes") else None,
        "top_logprobs": [
            {
                "token": t.token,
                "logprob": t.logprob,
                "bytes": list(t.bytes) if t.HasField("bytes") else None,
            }
            for t in entry.top_logprobs
        ],
    }


def _token_ids(choice: OpenAIChoice, key: str) -> list[int] | None:
    value = (choice.model_extra or {}).get(key)
    return None if value is None else [int(i) for i in value]


def choice_to_proto(choice: OpenAIChoice, *, tokens: bool = True) -> pb.Choice:
    """`tokens=False` leaves out what only training needs: logprobs and token ids."""
    message = choice.message.model_dump(mode="json", exclude_unset=True)
    out = pb.Choice(
        index=choice.index,
        finish_reason=choice.finish_reason or "",
        message=message_to_proto(message, _CHOICE_MESSAGE_KEYS),
    )
    if not tokens:
        return out
    out.has_logprobs = choice.logprobs is not None and choice.logprobs.content is not None
    out.logprobs.extend(_logprobs_to_proto(choice))
    prompt_ids, sampled_ids = (
        _token_ids(choice, "prompt_token_ids"),
        _token_ids(choice, "token_ids"),
    )
    if prompt_ids is not None or sampled_ids is not None:
        out.has_token_ids = True
        out.prompt_token_ids.extend(prompt_ids or [])
        out.token_ids.extend(sampled_ids or [])
    return out


def choice_from_proto(choice: pb.Choice) -> OpenAIChoice:
    logprobs = (
        {"content": [_logprob_entry(e) for e in choice.logprobs], "refusal": None}
        if choice.has_logprobs
        else None
    )
    fields: dict[str, Any] = {
        "index": choice.index,
        "finish_reason": choice.finish_reason or "stop",
        "message": message_from_proto(choice.message),
        "logprobs": logprobs,
    }
    if choice.has_token_ids:
        # Extra fields of the OpenAI model (`model_extra`), as ART expects them. A prompt is
        # never empty (a chat template always makes tokens): empty prompt ids were absent.
        if choice.prompt_token_ids:
            fields["prompt_token_ids"] = list(choice.prompt_token_ids)
        fields["token_ids"] = list(choice.token_ids)
    return OpenAIChoice.model_validate(fields)


def _items_to_proto(items: list[Any], tokens: bool = True) -> list[pb.MessageOrChoice]:
    out = []
    for item in items:
        if isinstance(item, OpenAIChoice):
            out.append(pb.MessageOrChoice(choice=choice_to_proto(item, tokens=tokens)))
        else:
            out.append(pb.MessageOrChoice(message=message_to_proto(cast(dict[str, Any], item))))
    return out


def _items_from_proto(items: Any) -> list[Any]:
    return [
        choice_from_proto(i.choice)
        if i.WhichOneof("item") == "choice"
        else message_from_proto(i.message)
        for i in items
    ]


# ---------------------------------------------------------------- trajectories
def trajectory_to_proto(trajectory: art.Trajectory, *, tokens: bool = True) -> pb.Trajectory:
    """`tokens=False`: no logprobs and no token ids (a reward request needs neither)."""
    out = pb.Trajectory(
        messages_and_choices=_items_to_proto(list(trajectory.messages_and_choices), tokens),
        tools_json=tools_to_json(trajectory.tools),
        additional_histories=[
            pb.History(
                messages_and_choices=_items_to_proto(list(h.messages_and_choices), tokens),
                tools_json=tools_to_json(h.tools),
            )
            for h in trajectory.additional_histories
        ],
        reward=trajectory.reward,
        logs=list(trajectory.logs),
    )
    if trajectory.initial_policy_version is not None:
        out.initial_policy_version = trajectory.initial_policy_version
    if trajectory.final_policy_version is not None:
        out.final_policy_version = trajectory.final_policy_version
    scalars_to_proto(out.metrics, trajectory.metrics)
    scalars_to_proto(out.metadata, trajectory.metadata)
    start = Timestamp()
    start.FromDatetime(trajectory.start_time)
    out.start_time.CopyFrom(start)
    return out


def trajectory_from_proto(message: pb.Trajectory) -> art.Trajectory:
    trajectory = art.Trajectory(
        messages_and_choices=_items_from_proto(message.messages_and_choices),
        tools=tools_from_json(message.tools_json),
        additional_histories=[
            art.trajectories.History(
                messages_and_choices=_items_from_proto(h.messages_and_choices),
                tools=tools_from_json(h.tools_json),
            )
            for h in message.additional_histories
        ],
        reward=message.reward,
        initial_policy_version=(
            message.initial_policy_version if message.HasField("initial_policy_version") else None
        ),
        final_policy_version=(
            message.final_policy_version if message.HasField("final_policy_version") else None
        ),
        metrics=scalars_from_proto(message.metrics),
        metadata=scalars_from_proto(message.metadata),
        logs=list(message.logs),
    )
    if message.HasField("start_time"):
        trajectory.start_time = message.start_time.ToDatetime()
    return trajectory


def group_to_proto(group: art.TrajectoryGroup, *, tokens: bool = True) -> pb.TrajectoryGroup:
    """`tokens=False`: no logprobs and no token ids (a reward request needs neither)."""
    out = pb.TrajectoryGroup(
        trajectories=[trajectory_to_proto(t, tokens=tokens) for t in group.trajectories],
        exceptions=[
            pb.RolloutException(type=e.type, message=e.message, traceback=e.traceback)
            for e in group.exceptions
        ],
        logs=list(group.logs),
    )
    scalars_to_proto(out.metadata, group.metadata)
    scalars_to_proto(out.metrics, group.metrics)
    return out


def group_from_proto(message: pb.TrajectoryGroup) -> art.TrajectoryGroup:
    # TrajectoryGroup.model_validate yields zero trajectories (custom constructor): build it.
    group = art.TrajectoryGroup(
        [trajectory_from_proto(t) for t in message.trajectories],
        metadata=scalars_from_proto(message.metadata),
        metrics=scalars_from_proto(message.metrics),
        logs=list(message.logs),
    )
    group.exceptions = [
        art.trajectories.PydanticException(type=e.type, message=e.message, traceback=e.traceback)
        for e in message.exceptions
    ]
    return group
