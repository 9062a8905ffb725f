"""The OpenAI model listing (`GET /v1/models`) as vLLM extends it: each model's
`max_model_len`. The inference service's front reads it from vLLM and lists it for every
policy it serves; the trainer reads the front's at submit (a job's `max_context_tokens`
may not exceed it), and the Tinker-compatible API's (the base model a client's must be,
and the context its data and samples fit)."""

from __future__ import annotations

from typing import Any


def listed_max_model_len(listed: Any) -> int | None:
    """The smallest `max_model_len` in a model listing, or None when it lists none."""
    models = listed.get("data") if isinstance(listed, dict) else None
    lengths = [m.get("max_model_len") for m in models or [] if isinstance(m, dict)]
    known = [n for n in lengths if type(n) is int and n > 0]  # a JSON `true` is no length
    return min(known) if known else None


def listed_base_model(listed: Any) -> str | None:
    """The base model of the inference service's listing: the one model not named
    `name@step` (its policies are; it lists the base first), or None."""
    models = listed.get("data") if isinstance(listed, dict) else None
    ids = [m.get("id") for m in models or [] if isinstance(m, dict)]
    return next((i for i in ids if isinstance(i, str) and i and "@" not in i), None)
