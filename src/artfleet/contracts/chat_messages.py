"""The OpenAI chat `messages` array: one check for every engine's front (pure).

Both the torch server and the inference service's front (in front of vLLM) validate
messages with this, so a malformed turn gets the same 400 naming the same field on
either engine; vLLM alone answers some of them with a 200.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@dataclass(frozen=True)
class MessageError(Exception):
    """A bad message; `param` names the field (`messages[2].role`)."""

    message: str
    param: str


def check_messages(value: Any) -> list[dict[str, Any]]:
    """The messages with list-of-text-parts content joined to one string."""
    if not isinstance(value, list) or not value:
        raise MessageError("'messages' must be a non-empty list", "messages")
    return [_message(m, i) for i, m in enumerate(value)]


def _message(message: Any, index: int) -> dict[str, Any]:
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise MessageError("each message must be an object", where)
    role = message.get("role")
    if role not in ROLES:
        raise MessageError(f"unknown role {role!r}; one of {sorted(ROLES)}", f"{where}.role")
    content = message.get("content")
    if content is None:
        if role != "assistant":  # OpenAI: optional only on an assistant turn
            raise MessageError("'content' is required", f"{where}.content")
        content = ""  # e.g. an assistant turn that only made tool calls
    elif isinstance(content, list):
        content = _join_text_parts(content, f"{where}.content")
    elif not isinstance(content, str):
        raise MessageError("'content' must be a string or a list of parts", f"{where}.content")
    if role == "tool" and not isinstance(message.get("tool_call_id", ""), str):
        raise MessageError("'tool_call_id' must be a string", f"{where}.tool_call_id")
    return {**message, "content": content}


def _join_text_parts(parts: list[Any], where: str) -> str:
    texts = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") != "text":
            raise MessageError("only text content parts are supported", where)
        if not isinstance(part.get("text"), str):
            raise MessageError("a text part needs a string 'text'", where)
        texts.append(part["text"])
    return "".join(texts)
