"""A judge's prompt fitted to the judge's context.

RULER sends a whole group in one prompt (and `judge` one trajectory): with a small judge
(the fleet's own policy, served with a 2048-token context on a CPU) a group of long
episodes does not fit, every call is refused, and `on_error` zeroes every reward. So
before a call, the judge's context is looked up (GET `<base_url>/models`: vLLM and the
inference service list each model's `max_model_len`; cached per endpoint) and, when the
prompt would not fit in it less the answer's `max_tokens`, every text of the
trajectories (message contents, tool-call arguments) longer than a cap is cut in its
middle, the same cap for all, the largest cap that fits. Shared beginnings stay equal, so
RULER still sends them once.

Tokens are estimated from characters (no tokenizer here). A judge that refuses the
prompt anyway, or that lists no context, says its context and the prompt's tokens in its
error (vLLM, the trainer's server): the call is made once more, cut to what it said.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from artfleet.contracts.model_listing import listed_max_model_len

log = logging.getLogger(__name__)

# Characters per token before the judge said otherwise: JSON-escaped chat runs 3-4.
CHARS_PER_TOKEN = 3.0
SAFETY = 0.9  # of the estimated room: the estimate is an estimate
TEMPLATE_TOKENS = 64  # the chat template's own tokens around the messages
MIN_CAP = 48  # a text cut shorter than this says nothing to a judge
LISTING_TTL_S = 600.0
LISTING_TIMEOUT_S = 3.0
_WRAPPER_CHARS = 32  # `<trajectory id="n">\n` ... `\n</trajectory>\n\n` around each one

Lists = list[list[dict[str, Any]]]

_CONTEXT = re.compile(r"(?:maximum context length is|model's context is) (\d+) tokens", re.I)
_PROMPT = re.compile(
    r"(\d+) (?:input tokens|in the messages|tokens in the prompt)"
    r"|at least (\d+)|prompt has (\d+) tokens",
    re.I,
)


@dataclass(frozen=True)
class ContextRefusal:
    """What a judge's "prompt too long" error says: its context, and (when it says) how
    many tokens the prompt had."""

    context: int
    prompt_tokens: int | None


def refusal(exc: BaseException) -> ContextRefusal | None:
    """The judge's context from its error, when the error is a context overflow."""
    text = str(exc)
    context = _CONTEXT.search(text)
    if context is None:
        return None
    prompt = _PROMPT.search(text)
    tokens = next((int(g) for g in prompt.groups() if g), None) if prompt else None
    return ContextRefusal(int(context.group(1)), tokens)


@dataclass(frozen=True)
class Budget:
    """How many characters of prompt a judge takes."""

    context: int
    chars_per_token: float = CHARS_PER_TOKEN

    def prompt_chars(self, max_tokens: int) -> int:
        room = self.context - max_tokens - TEMPLATE_TOKENS
        return max(0, int(room * self.chars_per_token * SAFETY))

    def after(self, refused: ContextRefusal, prompt_chars: int) -> Budget:
        """The budget a refusal teaches: the judge's own context and, when it counted the
        prompt's tokens, the characters per token of this very prompt."""
        ratio = self.chars_per_token / 2  # it did not say: be much more careful
        if refused.prompt_tokens:
            ratio = min(self.chars_per_token, prompt_chars / refused.prompt_tokens)
        return Budget(refused.context, ratio)


class JudgeContexts:
    """Judges' budgets by (base_url, model): from their model listing, or learned from a
    refusal (its context and characters per token); None for a judge that lists no
    context (a hosted judge: nothing is cut)."""

    def __init__(self, ttl_s: float = LISTING_TTL_S) -> None:
        self._ttl_s = ttl_s
        self._known: dict[tuple[str, str], tuple[float, Budget | None]] = {}

    def learn(self, base_url: str, model: str, budget: Budget) -> None:
        self._known[(base_url, model)] = (time.monotonic() + self._ttl_s, budget)

    async def budget(self, base_url: str, model: str, api_key: str) -> Budget | None:
        key = (base_url, model)
        cached = self._known.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        tokens = await _listed(base_url, model, api_key)
        budget = Budget(tokens) if tokens else None
        self._known[key] = (time.monotonic() + self._ttl_s, budget)
        return budget


async def _listed(base_url: str, model: str, api_key: str) -> int | None:
    try:
        async with httpx.AsyncClient(timeout=LISTING_TIMEOUT_S) as client:
            reply = await client.get(
                f"{base_url.rstrip('/')}/models", headers={"Authorization": f"Bearer {api_key}"}
            )
        listed = reply.json() if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError) as exc:
        log.info("judge %s lists no models (%s): its prompts are not cut", base_url, exc)
        return None
    data = listed.get("data") if isinstance(listed, dict) else None
    mine = [m for m in data or [] if isinstance(m, dict) and m.get("id") == model]
    return listed_max_model_len({"data": mine or data})


def _cut_text(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    marker = f" …[{len(text) - cap} chars cut]… "
    keep = max(0, cap - len(marker))
    head = keep * 2 // 3  # the start says what was asked, the end how it ended
    return text[:head] + marker + text[len(text) - (keep - head) :]


def cut(value: Any, cap: int) -> Any:
    """`value` with every string longer than `cap` cut in its middle."""
    if isinstance(value, str):
        return _cut_text(value, cap)
    if isinstance(value, dict):
        return {k: cut(v, cap) for k, v in value.items()}
    if isinstance(value, list):
        return [cut(v, cap) for v in value]
    return value


def _chars(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages, default=str))


def ruler_chars(lists: Lists) -> int:
    """The characters RULER's prompt spends on `lists`: a shared beginning once (ART's
    common prefix), then each trajectory's rest; all identical: one of them."""
    first = lists[0]
    prefix = 0
    while prefix < len(first) and all(
        len(m) > prefix and m[prefix] == first[prefix] for m in lists
    ):
        prefix += 1
    if all(len(m) == prefix for m in lists):
        return _chars(first) + _WRAPPER_CHARS
    shared = _chars(first[:prefix]) + _WRAPPER_CHARS if prefix else 0
    return shared + sum(_chars(m[prefix:]) + _WRAPPER_CHARS for m in lists)


def _longest(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return max((_longest(v) for v in items), default=0)


def fit(lists: Lists, room: int) -> tuple[Lists, int | None]:
    """`lists` cut to `room` characters (as RULER renders them) with the largest cap that
    fits, and that cap (None: nothing was cut). Raises ValueError when even MIN_CAP does
    not fit."""
    if ruler_chars(lists) <= room:
        return lists, None
    if ruler_chars(cut(lists, MIN_CAP)) > room:
        raise ValueError(f"{MIN_CAP}-character texts")
    low, high = MIN_CAP, _longest(lists)  # low fits, high does not
    while high - low > 1:
        middle = (low + high) // 2
        if ruler_chars(cut(lists, middle)) <= room:
            low = middle
        else:
            high = middle
    return cut(lists, low), low


def fixed_chars(*texts: str, tools: Sequence[Any] | None = None) -> int:
    """The characters of a prompt that are not trajectories (instructions, rubric, tools)."""
    return sum(len(t) for t in texts) + (len(json.dumps(tools)) if tools else 0)
