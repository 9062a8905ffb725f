"""The tool calls of one assistant turn: OpenAI `tool_calls`, or Hermes-style text.

A policy server that speaks tools returns `message.tool_calls`. One that does not (an
older built-in server, a raw completion endpoint) leaves the model's own text, which for
the Qwen/Hermes family and our prompts is `<tool_call>{"name": ..., "arguments": ...}
</tool_call>`; vLLM's hermes parser reads the same blocks. The turn itself is never
rewritten: ART trains on the tokens as sampled.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from openai.types.chat.chat_completion import Choice

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


@dataclass(frozen=True)
class RequestedCall:
    """One call as the model wrote it; `arguments` is JSON text (maybe malformed)."""

    id: str
    name: str
    arguments: str
    native: bool  # from `tool_calls` (True) or parsed from the text (False)


def requested_calls(choice: Choice, turn: int) -> list[RequestedCall]:
    calls = choice.message.tool_calls or []
    if calls:
        return [
            RequestedCall(
                c.id or f"call_{turn}_{i}",
                str(getattr(getattr(c, "function", None), "name", "") or ""),
                str(getattr(getattr(c, "function", None), "arguments", "") or ""),
                native=True,
            )
            for i, c in enumerate(calls)
        ]
    return text_calls(choice.message.content or "", turn)


def text_calls(text: str, turn: int) -> list[RequestedCall]:
    """Hermes `<tool_call>` blocks in `text` (an unclosed last block counts: the turn may
    have stopped at the end tag). A block that is no JSON object is a call named "" whose
    arguments are the raw text, so the model hears what was wrong."""
    found: list[RequestedCall] = []
    for i, match in enumerate(_HERMES.finditer(text)):
        body = match.group(1).strip()
        name, arguments = _split_call(body)
        found.append(RequestedCall(f"call_{turn}_{i}", name, arguments, native=False))
    return found


def _split_call(body: str) -> tuple[str, str]:
    # The first JSON value in the block; trailing text (a small model's extra `}`) is
    # ignored, since the call it closes is already complete and unambiguous.
    try:
        value, _ = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError:
        return "", body
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return "", body
    arguments = value.get("arguments", value.get("parameters", {}))
    return value["name"], arguments if isinstance(arguments, str) else json.dumps(arguments)


def parse_arguments(arguments: str) -> dict[str, Any]:
    """The arguments as an object; raises ValueError with a message meant for the model."""
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value
