"""A minimal Server-Sent Events reader over httpx (the API tests and the bench)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class SseEvent:
    id: str | None
    event: str
    data: Any


def sse_events(response: httpx.Response) -> Iterator[SseEvent]:
    """Events as they arrive; comment lines (keep-alives) are skipped."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                yield SseEvent(
                    fields.get("id"), fields.get("event", "message"), json.loads(fields["data"])
                )
            fields = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            fields[key] = value.removeprefix(" ")
