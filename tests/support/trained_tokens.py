"""What the trainer trains on, checked against what the policy sampled (pure; used on
real multi-turn trajectories from the engines and unit-tested on hand-made ones).

A trajectory may be trained as one sequence or several (one per run of turns whose
prompts extend each other). Across them, three things must hold:
- the trained positions (assistant mask) hold exactly the sampled token ids, each turn
  once: no system, user or tool-observation token is trained on;
- each trained position carries the logprob the engine reported for that very token;
- each turn is trained after exactly the prompt ids the engine sampled it from (its
  `prompt_token_ids`): an earlier turn's tool call was not re-rendered into other ids.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Turn = tuple[list[int], list[float], list[int]]  # sampled ids, their logprobs, prompt ids


def sampled_turns(items: Sequence[Any]) -> list[Turn]:
    """(sampled ids, their logprobs, prompt ids) of each assistant turn with logprobs."""
    turns = []
    for item in items:
        logprobs = getattr(item, "logprobs", None)
        if logprobs is None or not logprobs.content:
            continue
        extra = item.model_extra or {}
        entries = logprobs.content
        ids = [int(e.token.removeprefix("token_id:")) for e in entries]
        turns.append((ids, [e.logprob for e in entries], list(extra.get("prompt_token_ids", []))))
    return turns


def mismatches(results: Sequence[Any], turns: Sequence[Turn]) -> list[str]:
    """Every way one trajectory's tokenized results depart from its sampled turns."""
    spans = [_span(r, start, end) for r in results for start, end in _spans(r.assistant_mask)]
    problems = []
    if len(spans) != len(turns):
        problems.append(f"{len(spans)} trained spans for {len(turns)} sampled turns")
    for k, (ids, lps, prompt) in enumerate(turns):
        same_ids = [s for s in spans if s[1] == ids]
        if not same_ids:
            problems.append(f"turn {k}: its sampled ids {ids} are not trained as one span")
            continue
        if prompt and not any(s[0] == prompt for s in same_ids):
            context = same_ids[0][0]
            at = _first_difference(context, prompt)
            problems.append(
                f"turn {k}: trained after another context than it was sampled from (first "
                f"difference at {at}: trained {context[at : at + 8]}, "
                f"sampled {prompt[at : at + 8]})"
            )
        if not any(_close(s[2], lps) for s in same_ids):
            problems.append(f"turn {k}: trained logprobs {same_ids[0][2]} != sampled {lps}")
    return problems


def _span(result: Any, start: int, end: int) -> tuple[list[int], list[int], list[float]]:
    ids = list(result.token_ids)
    return ids[:start], ids[start:end], list(result.logprobs[start:end])


def _spans(mask: Sequence[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _close(got: Sequence[float], want: Sequence[float]) -> bool:
    return len(got) == len(want) and all(
        not math.isnan(a) and abs(a - b) <= 1e-6 for a, b in zip(got, want, strict=True)
    )


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))
