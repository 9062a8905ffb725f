"""Train each assistant turn in exactly the context it was sampled from.

ART 0.5.18 tokenizes a multi-turn trajectory as one sequence: the chat template renders
the history, and each sampled turn's ids replace its placeholder. Turn k is then
trained after the *sampled* ids of earlier turns, while the engine sampled it after
their *re-rendered* text: a tool call the model wrote as `{"name":"move"}` comes back
from the template as `{"name": "move"}`. Then turn k's logprobs belong to another
context than the one it is trained in (measured on 2048 with SmolLM2: the context
differed from turn 1 on).

Both engines return, per turn, the prompt ids they saw (`prompt_token_ids`) and the ids
they sampled (`token_ids`). From those, each trajectory is rebuilt as the fewest
sequences in which every turn follows exactly its own prompt: a turn extends the current
sequence when its prompt starts with it (the common case: the engine rendered the
history as sampled), else it starts a new one. Advantage and per-trajectory weight stay
ART's; a trajectory with any turn lacking ids keeps ART's tokenization.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import groupby, takewhile
from typing import Any

from openai.types.chat.chat_completion import Choice

from artfleet_trainer.backends.art_compat import art

TokenizedResult = art.preprocessing.tokenize.TokenizedResult


@dataclass(frozen=True)
class Turn:
    prompt: list[int]
    sampled: list[int]
    logprobs: list[float]


@dataclass
class TurnSequence:
    token_ids: list[int]
    mask: list[int]
    logprobs: list[float]
    offsets: list[int]

    def extend(self, turn: Turn) -> None:
        context = turn.prompt[len(self.token_ids) :]
        self.offsets.append(len(self.token_ids) + len(context))
        self.token_ids += context + turn.sampled
        self.mask += [0] * len(context) + [1] * len(turn.sampled)
        self.logprobs += [math.nan] * len(context) + turn.logprobs


def turns_of(items: Sequence[Any]) -> list[Turn] | None:
    """The sampled turns with their exact ids, or None if any trainable turn lacks them."""
    turns = []
    for item in items:
        if not isinstance(item, Choice) or item.logprobs is None:
            continue
        extra = item.model_extra or {}
        prompt, sampled = extra.get("prompt_token_ids"), extra.get("token_ids")
        entries = item.logprobs.content or []
        if not prompt or not sampled or len(sampled) != len(entries):
            return None
        turns.append(Turn(list(prompt), list(sampled), [e.logprob for e in entries]))
    return turns or None


def sequences(turns: Sequence[Turn]) -> list[TurnSequence]:
    """The fewest sequences in which each turn follows exactly its own prompt."""
    out: list[TurnSequence] = []
    for turn in turns:
        current = out[-1] if out else None
        if current is None or turn.prompt[: len(current.token_ids)] != current.token_ids:
            current = TurnSequence([], [], [], [])
            out.append(current)
        current.extend(turn)
    return out


def exact(results: Iterable[Any], tokenizer: Any) -> list[Any]:
    """ART's results with every trajectory whose turns carry ids rebuilt from them."""
    out: list[Any] = []
    by_group = groupby(results, key=lambda r: r.prompt_id)  # ART yields a group at a time
    for _, group in by_group:
        rebuilt: list[Any] = []
        for result in group:
            # Without additional histories ART gives a trajectory exactly one result.
            turns = turns_of(result.trajectory.messages_and_choices)
            if turns is None or result.trajectory.additional_histories:
                rebuilt.append(result)
                continue
            rebuilt.extend(_results(result, sequences(turns), tokenizer))
        out.extend(_with_shared_prompt(rebuilt))
    return out


def _results(template: Any, seqs: list[TurnSequence], tokenizer: Any) -> list[Any]:
    weight = 1 / (sum(sum(s.mask) for s in seqs) + 1e-6)
    return [
        replace(
            template,
            chat=tokenizer.decode(s.token_ids),
            token_ids=s.token_ids,
            input_pos=list(range(len(s.token_ids))),
            assistant_mask=s.mask,
            logprobs=s.logprobs,
            choice_offsets=s.offsets,
            extra_logprobs={},
            weight=weight,
        )
        for s in seqs
    ]


def _with_shared_prompt(results: list[Any]) -> list[Any]:
    """ART's group prompt: the longest prefix shared by all, before any trained token."""
    if not results:
        return results
    columns = zip(*(r.token_ids for r in results), strict=False)
    shared = len(list(takewhile(lambda x: len(set(x)) == 1, columns)))
    first_trained = min(
        next((i for i, lp in enumerate(r.logprobs) if not math.isnan(lp)), len(r.logprobs))
        for r in results
    )
    length = max(min(shared, first_trained) - 1, 0)
    return [replace(r, prompt_length=length) for r in results]
