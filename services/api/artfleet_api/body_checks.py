"""What a request's body may be, checked as ASGI middleware before any handler reads it:

- its type: JSON (`application/json`, `application/*+json`; none given reads as JSON),
  on every route, the Tinker-compatible ones included; forward_backward also takes
  protobuf (`OTHER_TYPES`). Anything else is 415 naming `Content-Type` and what is expected.
- its size: `ARTFLEET_MAX_BODY_BYTES` on every route, `ARTFLEET_MAX_DATA_BODY_BYTES` on
  the routes that carry training data or trajectories (`DATA_ROUTES`). Over it is 413
  naming the limit and its setting: on the Content-Length, before a byte is read, and on
  the bytes read for a body without one (chunked), or one longer than it said.

An empty body has no type to check. A body that is not valid JSON is answered by the
error handlers (errors.py, tinker_api/errors.py), in the words of `not_json`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from artfleet_api.middleware import ASGIApp, Message, Receive, Scope, Send, refuse
from artfleet_api.settings import MIB, ApiSettings

TINKER = "/api/v1"
# Training data (forward passes) and trajectories to score: big bodies by nature.
DATA_ROUTES = frozenset({f"{TINKER}/forward_backward", f"{TINKER}/forward", "/evaluate"})
JSON = "application/json"
OTHER_TYPES: Mapping[str, tuple[str, ...]] = {
    f"{TINKER}/forward_backward": ("application/x-protobuf",)
}


@dataclass(frozen=True)
class BodyLimit:
    bytes: int
    setting: str  # the variable that sets it

    def refusal(self, size: str) -> tuple[str, dict[str, Any]]:
        """The 413's message and its extra fields."""
        shown = f"{self.bytes / MIB:g} MiB" if self.bytes % MIB == 0 else f"{self.bytes} bytes"
        why = f"the body ({size}) is over this route's limit of {shown} ({self.setting})"
        return why, {"limit_bytes": self.bytes, "setting": self.setting}


def limits(settings: ApiSettings) -> tuple[BodyLimit, BodyLimit]:
    """(every route's, the data routes'), each with the variable that sets it."""
    prefix = str(settings.model_config.get("env_prefix", ""))
    return (
        BodyLimit(settings.max_body_bytes, f"{prefix}MAX_BODY_BYTES"),
        BodyLimit(settings.max_data_body_bytes, f"{prefix}MAX_DATA_BODY_BYTES"),
    )


def not_json(reason: str, position: Any) -> str:
    """A body that does not parse: where it broke is in the message, never a field."""
    at = f" at character {position}" if isinstance(position, int) else ""
    return f"body: not valid JSON ({reason}{at})"


def json_decode_error(errors: Any) -> str | None:
    """FastAPI's complaint about a body that does not parse (`json_invalid`, located at a
    character offset), as `not_json` words it; None for any other validation error."""
    for error in errors:
        if error.get("type") == "json_invalid":
            loc = tuple(error.get("loc", ()))
            reason = (error.get("ctx") or {}).get("error") or "it does not parse"
            return not_json(str(reason), loc[1] if len(loc) > 1 else None)
    return None


def _media(content_type: bytes | None) -> str | None:
    if content_type is None:
        return None
    return content_type.decode("latin-1").split(";")[0].strip().lower()


def _is_json(media: str) -> bool:
    return media == JSON or (media.startswith("application/") and media.endswith("+json"))


def _expected(path: str) -> list[str]:
    return [JSON, *OTHER_TYPES.get(path, ())]


class BodyTooLarge(Exception):
    """Raised into the handler reading a body past its limit: the handler stops reading."""


class BodyMiddleware:
    def __init__(self, app: ASGIApp, settings: ApiSettings) -> None:
        self.app = app
        self._ordinary, self._data = limits(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        headers = dict(scope.get("headers") or [])
        length = _content_length(headers)
        if (length or 0) > 0 or b"transfer-encoding" in headers:  # a body is coming
            media = _media(headers.get(b"content-type"))
            if media is not None and not _is_json(media) and media not in _expected(path):
                expected = _expected(path)
                why = f"Content-Type: the body must be {' or '.join(expected)}, not {media}"
                await refuse(send, path, 415, why, "Content-Type", expected=expected)
                return
        limit = self._data if path in DATA_ROUTES else self._ordinary
        if length is not None and length > limit.bytes:
            why, extra = limit.refusal(f"Content-Length {length}")
            await refuse(send, path, 413, why, "body", **extra)
            return
        await self._counted(scope, receive, send, limit)

    async def _counted(self, scope: Scope, receive: Receive, send: Send, limit: BodyLimit) -> None:
        """Runs the app with the body's bytes counted as they arrive; past the limit the
        read raises in the handler, whatever it answers to that is dropped, and the 413
        goes out instead (unless the app had already begun its answer)."""
        state = {"read": 0, "over": False, "answered": False}

        async def counting() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                state["read"] += len(message.get("body", b""))
                if state["read"] > limit.bytes:
                    state["over"] = True
                    raise BodyTooLarge()
            return message

        async def sending(message: Message) -> None:
            if state["over"] and not state["answered"]:
                return  # FastAPI's 400 for a body it could not read: ours replaces it
            state["answered"] = state["answered"] or message["type"] == "http.response.start"
            await send(message)

        with contextlib.suppress(BodyTooLarge):  # the handler did not catch it
            await self.app(scope, counting, sending)
        if state["over"] and not state["answered"]:
            why, extra = limit.refusal(f"{state['read']} bytes read so far")
            await refuse(send, scope["path"], 413, why, "body", **extra)


def _content_length(headers: Mapping[bytes, bytes]) -> int | None:
    """None without one (uvicorn has refused a malformed one before this)."""
    raw = headers.get(b"content-length")
    return int(raw) if raw is not None and raw.strip().isdigit() else None
