"""Sampled assistant turns that made tool calls, made safe for ART 0.5.18's tokenizer.

ART renders a trainable turn as a sentinel token plus the message's `tool_calls` through
the chat template, then puts the sampled tokens in place of the sentinel only: for every
turn but the last (whose calls it drops itself) the calls end up twice, once as sampled
and once as rendered after them. The sampled tokens already hold the `<tool_call>`
blocks (the server parsed the calls from them), so the rendered copy is dropped here,
before tokenizing: the policy trains on exactly what it produced.
"""

from __future__ import annotations

from typing import Any

from openai.types.chat.chat_completion import Choice

from artfleet_trainer.backends.art_compat import art


def _strip(items: list[Any]) -> list[Any]:
    out = []
    for item in items:
        if isinstance(item, Choice) and item.logprobs is not None and item.message.tool_calls:
            message = item.message.model_copy(
                update={"tool_calls": None, "content": item.message.content or ""}
            )
            item = item.model_copy(update={"message": message})
        out.append(item)
    return out


def _trajectory(trajectory: art.Trajectory) -> art.Trajectory:
    histories = [
        h.model_copy(update={"messages_and_choices": _strip(h.messages_and_choices)})
        for h in trajectory.additional_histories
    ]
    return trajectory.model_copy(
        update={
            "messages_and_choices": _strip(trajectory.messages_and_choices),
            "additional_histories": histories,
        }
    )


def without_rendered_tool_calls(groups: list[art.TrajectoryGroup]) -> list[art.TrajectoryGroup]:
    return [
        group.model_copy(update={"trajectories": [_trajectory(t) for t in group.trajectories]})
        for group in groups
    ]
