"""What the front checks in an OpenAI request before vLLM sees it (pure; unit-tested).

vLLM answers some malformed bodies with a 200 (a message with an unknown role and no
content is rendered as an empty turn); the fleet's callers get a 400 naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from artfleet.contracts.chat_messages import MessageError, check_messages


@dataclass(frozen=True)
class BadRequest(Exception):
    message: str
    param: str


def parse_object(raw: bytes) -> dict[str, Any]:
    """A JSON object, or a 400 naming the body."""
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        raise BadRequest("the body is not valid JSON", "body") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", "body")
    return body


def parse_body(raw: bytes) -> dict[str, Any]:
    """An OpenAI request: a JSON object that names a model."""
    body = parse_object(raw)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("'model' is required: a served policy name", "model")
    return body


def check_chat(body: dict[str, Any]) -> None:
    try:
        check_messages(body.get("messages"))
    except MessageError as exc:
        raise BadRequest(exc.message, exc.param) from None


def check_completion(body: dict[str, Any]) -> None:
    prompt = body.get("prompt")
    if not isinstance(prompt, str | list) or not prompt:
        raise BadRequest("'prompt' must be a non-empty string or list", "prompt")
