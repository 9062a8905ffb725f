"""Batched sampling with a KV cache: many chat requests, one forward pass per token.

On a CPU a decode step costs about the same for 1 row as for 8 (reading the weights
dominates), so the server gathers concurrent requests and runs them here together:
prompts are left-padded and prefilled once per request, the cache is then repeated for
the request's `n` choices, and rows leave the batch as soon as they finish.

Reported logprobs are those of the *raw* model distribution (log-softmax of the
unscaled logits), not of the temperature/top-p distribution actually sampled from.
That is what vLLM reports by default (`logprobs_mode="raw_logprobs"`) and what ART's
loss assumes: it compares these "old" logprobs with "new" logprobs the trainer computes
from plain logits, and the two must agree before an update (importance ratio 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    params: SamplingParams


@dataclass
class SequenceOutput:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    # Per generated token: the (token id, logprob) pairs of the most likely tokens.
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    text: str = ""
    finish_reason: FinishReason | None = None


@dataclass
class _Row:
    """One choice being generated, and what it needs at every step."""

    request: GenerationRequest
    max_tokens: int
    generator: torch.Generator | None
    out: SequenceOutput = field(default_factory=SequenceOutput)


def stop_token_ids_of(model: Any, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """End-of-turn ids: the generation config's and the tokenizer's end-of-sequence ids."""
    ids: set[int] = set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (config_eos, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return frozenset(ids)


@torch.inference_mode()
def generate_batch(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    requests: list[GenerationRequest],
    *,
    stop_token_ids: frozenset[int],
    max_context: int,
) -> list[list[SequenceOutput]]:
    """Generate every request's `n` choices together; outputs in request order."""
    rows = _make_rows(requests, max_context)
    pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    logits, cache, mask, positions = _prefill(model, requests, pad_id)
    # Expand the per-request prefill to one row per choice.
    row_to_request = torch.tensor(
        [i for i, r in enumerate(requests) for _ in range(r.params.n)], dtype=torch.long
    )
    cache.batch_select_indices(row_to_request)
    logits, mask, positions = logits[row_to_request], mask[row_to_request], positions[row_to_request]
    active = list(range(len(rows)))
    while True:
        tokens = _sample_step(logits, [rows[i] for i in active])
        _record_step(logits, tokens, [rows[i] for i in active], tokenizer, stop_token_ids)
        keep = [k for k, i in enumerate(active) if rows[i].out.finish_reason is None]
        if not keep:
            break
        if len(keep) < len(active):
            # Finished rows leave the batch: no more compute spent on them.
            index = torch.tensor(keep, dtype=torch.long)
            cache.batch_select_indices(index)
            tokens, mask, positions = tokens[index], mask[index], positions[index]
            active = [active[k] for k in keep]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions + 1
        out = model(
            input_ids=tokens.unsqueeze(1),
            attention_mask=mask,
            position_ids=positions.unsqueeze(1),
            past_key_values=cache,
            use_cache=True,
        )
        logits, cache = out.logits[:, -1, :].float(), out.past_key_values
    return _collect(rows, requests, tokenizer)


def _make_rows(requests: list[GenerationRequest], max_context: int) -> list[_Row]:
    rows: list[_Row] = []
    for request in requests:
        room = max_context - len(request.prompt_ids)
        if room < 1:
            raise ValueError(
                f"prompt has {len(request.prompt_ids)} tokens; the context holds {max_context}"
            )
        for choice in range(request.params.n):
            generator = None
            if request.params.seed is not None:
                # Distinct but reproducible streams for the n choices of a seeded request.
                generator = torch.Generator().manual_seed(request.params.seed + choice)
            rows.append(_Row(request, min(request.params.max_tokens, room), generator))
    return rows


def _prefill(
    model: Any, requests: list[GenerationRequest], pad_id: int
) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
    """Left-pad the prompts and run them once; return last logits, cache, mask, positions."""
    width = max(len(r.prompt_ids) for r in requests)
    input_ids = torch.full((len(requests), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(requests), width), dtype=torch.long)
    for i, request in enumerate(requests):
        input_ids[i, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
        mask[i, width - len(request.prompt_ids) :] = 1
    # Positions count real tokens only, so a left-padded row sees the same positions
    # as it would alone (and as the trainer's input_pos).
    position_ids = (mask.cumsum(dim=1) - 1).clamp(min=0)
    out = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=position_ids,
        use_cache=True,
        logits_to_keep=1,  # the prompt's other logits are never needed
    )
    return out.logits[:, -1, :].float(), out.past_key_values, mask, position_ids[:, -1]


def _sample_step(logits: torch.Tensor, rows: list[_Row]) -> torch.Tensor:
    """One token per row from its temperature/top-p distribution (greedy at temperature 0)."""
    temperatures = torch.tensor([r.request.params.temperature for r in rows])
    top_ps = torch.tensor([r.request.params.top_p for r in rows])
    probs = torch.softmax(logits / temperatures.clamp(min=1e-5).unsqueeze(1), dim=-1)
    if bool((top_ps < 1.0).any()):
        probs = top_p_filter(probs, top_ps)
    tokens = torch.empty(len(rows), dtype=torch.long)
    for i, row in enumerate(rows):
        if row.request.params.temperature <= 0:
            tokens[i] = torch.argmax(logits[i])
        else:
            tokens[i] = torch.multinomial(probs[i], 1, generator=row.generator)[0]
    return tokens


def top_p_filter(probs: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """Keep each row's smallest set of most likely tokens whose mass reaches its top_p."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_ps.unsqueeze(1), 0.0)
    filtered = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return filtered / filtered.sum(dim=-1, keepdim=True)


def _record_step(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    rows: list[_Row],
    tokenizer: PreTrainedTokenizerBase,
    stop_token_ids: frozenset[int],
) -> None:
    logprobs = torch.log_softmax(logits, dim=-1)
    chosen = logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1).tolist()
    k = max(r.request.params.top_logprobs for r in rows)
    top = torch.topk(logprobs, k, dim=-1) if k > 0 else None
    for i, row in enumerate(rows):
        token = int(tokens[i])
        row.out.token_ids.append(token)
        row.out.logprobs.append(float(chosen[i]))
        if top is not None and row.request.params.top_logprobs > 0:
            n_top = row.request.params.top_logprobs
            ids, values = top.indices[i, :n_top].tolist(), top.values[i, :n_top].tolist()
            row.out.top_logprobs.append(list(zip(ids, values, strict=True)))
        row.out.finish_reason = _finish_reason(row, token, tokenizer, stop_token_ids)


def _finish_reason(
    row: _Row, token: int, tokenizer: PreTrainedTokenizerBase, stop_token_ids: frozenset[int]
) -> FinishReason | None:
    if token in stop_token_ids:
        return "stop"
    if row.request.params.stop and _find_stop(_decode(tokenizer, row.out.token_ids), row):
        return "stop"
    if len(row.out.token_ids) >= row.max_tokens:
        return "length"
    return None


def _find_stop(text: str, row: _Row) -> int | None:
    """Where the earliest stop string starts in `text`, or None."""
    hits = [text.find(s) for s in row.request.params.stop if s and s in text]
    return min(hits) if hits else None


def _decode(tokenizer: PreTrainedTokenizerBase, token_ids: list[int]) -> str:
    return str(tokenizer.decode(token_ids, skip_special_tokens=True))


def _collect(
    rows: list[_Row], requests: list[GenerationRequest], tokenizer: PreTrainedTokenizerBase
) -> list[list[SequenceOutput]]:
    results: list[list[SequenceOutput]] = [[] for _ in requests]
    by_request = {id(r): i for i, r in enumerate(requests)}
    for row in rows:
        out = row.out
        # The end-of-turn token stays in token_ids/logprobs (ART expects it, as from
        # vLLM) but not in the text; a stop string and what follows it are cut off.
        text = _decode(tokenizer, out.token_ids)
        cut = _find_stop(text, row) if row.request.params.stop else None
        out.text = text if cut is None else text[:cut]
        results[by_request[id(row.request)]].append(out)
    return results
