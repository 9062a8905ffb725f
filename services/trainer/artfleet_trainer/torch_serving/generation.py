"""Batched sampling with a KV cache: many chat requests, one forward pass per token.

On a CPU a decode step costs about the same for 1 row as for 8 (streaming the weights
from memory dominates), so requests are generated together. `BatchEngine` holds one
running batch: prompts are left-padded and prefilled once per request, the cache is
repeated for the request's `n` choices, rows leave as soon as they finish, and new
requests can join between steps (their cache is left-padded to the batch's length), so
an agent's next turn need not wait for a whole batch to drain.

With a `PrefixCache`, a prompt whose beginning was run before (an episode's earlier
turns, a group's shared prompt) prefills only the rest: its cached key/values are the
start of its row. Finished rows leave their key/values (prompt + answer) in the cache.

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
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from .adapter_versions import AdapterSnapshot, Drain
from .grammar import mask_logits, new_matcher
from .prefix_cache import PrefixCache, PrefixHit
from .prompt_logprobs import PromptTokenLogprob, score_prompt
from .sampling import sample

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0
    top_k: int = 0  # 0: no top-k cut
    # The request's own stop ids (vLLM's `stop_token_ids`), besides the end-of-turn ones.
    stop_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False  # the end-of-turn ids do not stop it (the request's ids do)
    prompt_logprobs: int | None = None  # None: not computed; k: also the k most likely


@dataclass
class SequenceOutput:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    # Per generated token: the (token id, logprob) pairs of the most likely tokens.
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    text: str = ""
    finish_reason: FinishReason | None = None
    # As vLLM's: the request's stop id or stop string that ended it (None: end of turn).
    stop_reason: int | str | None = None


@dataclass(eq=False)
class GenerationRequest:
    prompt_ids: list[int]
    params: SamplingParams
    outputs: list[SequenceOutput] = field(default_factory=list)
    unfinished: int = 0
    cancelled: bool = False  # set by the server when the client went away
    # An xgrammar CompiledGrammar for structured output (response_format), or None.
    # Constrained and free requests share the batch: only their rows' sampling differs.
    grammar: Any = None
    served_step: int | None = None  # the policy step that generated it (set on admission)
    prompt_logprobs: list[PromptTokenLogprob] | None = None  # set on admission when asked


@dataclass(eq=False)
class _Row:
    """One choice being generated."""

    request: GenerationRequest
    out: SequenceOutput
    max_tokens: int
    generator: torch.Generator | None
    matcher: Any = None  # the row's xgrammar GrammarMatcher when its request has a grammar
    version: int = 0  # the engine's weights version when the row was prefilled


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


class BatchEngine:
    """The running batch of one model. Not thread-safe: one caller at a time."""

    def __init__(
        self,
        model: Any,
        tokenizer: PreTrainedTokenizerBase,
        *,
        stop_token_ids: frozenset[int],
        max_context: int,
        prefix_cache: PrefixCache | None = None,
        step: int = 0,
    ) -> None:
        self.model = model
        self.served_step = step  # the policy step served (the checkpoint the weights are)
        self.drain: Drain | None = None  # old rows finishing on the old adapter
        # None or a zero budget: every prompt is prefilled whole.
        self.prefix_cache = (
            prefix_cache if prefix_cache is not None and prefix_cache.enabled else None
        )
        self.weights_version = 0
        self.tokenizer = tokenizer
        self.stop_token_ids = stop_token_ids
        self.max_context = max_context
        self.pad_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
        self.device = next(model.parameters()).device
        self.reset()

    def reset(self) -> None:
        self.end_drain()
        self.rows: list[_Row] = []
        self.cache: Any = None
        self.mask = torch.zeros((0, 0), dtype=torch.long)  # [rows, cache length]
        self.positions = torch.zeros(0, dtype=torch.long)  # each row's last position
        self.logits = torch.zeros(0)  # [rows, vocab]: the next token's distribution

    def weights_changed(self, step: int | None = None, old: AdapterSnapshot | None = None) -> None:
        """The model's weights were updated (a training step): cached key/values are stale.

        With `old` (the adapter before the update) the running rows finish on it, and
        new requests wait for them (adapter_versions.py); without it they go on under the
        new weights. Either way what they computed is never cached."""
        self.weights_version += 1
        if step is not None:
            self.served_step = step
        if self.prefix_cache is not None:
            self.prefix_cache.set_version(self.weights_version)
        if old is not None and self.rows:
            self.drain = Drain.start(self.model, old, len(self.rows))

    def end_drain(self) -> None:
        """Put the newest weights back (the old rows finished, or training comes next)."""
        drain, self.drain = getattr(self, "drain", None), None
        if drain is not None:
            drain.end(self.model)

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    def can_join(self) -> bool:
        """New requests can join a running batch only with plain dynamic caches."""
        return self.cache is None or all(type(layer) is DynamicLayer for layer in self.cache.layers)

    @torch.inference_mode()
    def admit(self, requests: list[GenerationRequest]) -> None:
        """Prefill `requests` and add their rows (one per choice) to the batch."""
        if not requests:
            return
        rows = [row for r in requests for row in _make_rows(r, self.max_context, self.device)]
        for row in rows:
            row.version = self.weights_version
        for request in requests:
            request.served_step = self.served_step
            if request.params.prompt_logprobs is not None:
                request.prompt_logprobs = score_prompt(
                    self.model, request.prompt_ids, request.params.prompt_logprobs, self.device
                )
        # Identical prompts (the episodes of one group start alike) are prefilled once.
        unique: dict[tuple[int, ...], int] = {}
        for request in requests:
            unique.setdefault(tuple(request.prompt_ids), len(unique))
        logits, cache, mask, order = self._prefill_unique(list(unique))
        expand = torch.tensor(
            [order[unique[tuple(r.prompt_ids)]] for r in requests for _ in range(r.params.n)],
            device=self.device,
        )
        cache.batch_select_indices(expand)
        logits, mask = logits[expand], mask[expand]
        positions = mask.sum(dim=1) - 1
        if self.cache is None:
            self.cache, self.mask, self.logits, self.positions = cache, mask, logits, positions
        else:
            self._merge(cache, mask, logits, positions)
        self.rows.extend(rows)

    def _prefill_unique(
        self, prompts: list[tuple[int, ...]]
    ) -> tuple[torch.Tensor, Any, torch.Tensor, list[int]]:
        """Prefill distinct prompts: those without a cached prefix together (left-padded),
        each one with a cached prefix alone, from the end of its prefix. Returns logits,
        cache and mask whose rows are in a new order: prompt i is row order[i]."""
        hits: list[tuple[int, PrefixHit]] = []
        misses: list[int] = []
        for i, prompt in enumerate(prompts):
            hit = None
            if self.prefix_cache is not None:
                hit = self.prefix_cache.lookup(prompt, self.weights_version)
            if hit is None:
                misses.append(i)
            else:
                hits.append((i, hit))
        parts: list[tuple[torch.Tensor, Any, torch.Tensor]] = []
        if misses:
            parts.append(
                _prefill(self.model, [prompts[i] for i in misses], self.pad_id, self.device)
            )
        for i, hit in hits:
            parts.append(_prefill_after(self.model, prompts[i], hit, self.device))
        logits, cache, mask = parts[0]
        for more_logits, more_cache, more_mask in parts[1:]:
            mask = _cat_rows(cache, mask, more_cache, more_mask)
            logits = torch.cat([logits, more_logits])
        order = [0] * len(prompts)
        for row, i in enumerate([*misses, *(i for i, _ in hits)]):
            order[i] = row
        return logits, cache, mask, order

    def _merge(
        self, cache: Any, mask: torch.Tensor, logits: torch.Tensor, positions: torch.Tensor
    ) -> None:
        """Append rows of another cache, left-padding the shorter one to the same length."""
        self.mask = _cat_rows(self.cache, self.mask, cache, mask)
        self.logits = torch.cat([self.logits, logits])
        self.positions = torch.cat([self.positions, positions])

    @torch.inference_mode()
    def step(self) -> list[GenerationRequest]:
        """Sample one token for every row; return the requests that just completed."""
        if not self.rows:
            return []
        # The grammar masks what is sampled; _record's logprobs stay the raw model's.
        sampling_logits = mask_logits(
            self.logits, [row.matcher for row in self.rows], self.logits.shape[-1]
        )
        tokens = sample(
            sampling_logits,
            [row.request.params for row in self.rows],
            [row.generator for row in self.rows],
        )
        completed = self._record(tokens)
        if self.prefix_cache is not None:
            self._store_finished()
        keep = [i for i, row in enumerate(self.rows) if row.out.finish_reason is None]
        if not keep:
            self.reset()
            return completed
        if len(keep) < len(self.rows):
            self._select(keep)
            tokens = tokens[torch.tensor(keep, device=self.device)]
        self._forward(tokens)
        return completed

    def _record(self, tokens: torch.Tensor) -> list[GenerationRequest]:
        logprobs = torch.log_softmax(self.logits, dim=-1)
        chosen = logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1).tolist()
        k = max(row.request.params.top_logprobs for row in self.rows)
        top = torch.topk(logprobs, k, dim=-1) if k > 0 else None
        completed: list[GenerationRequest] = []
        for i, row in enumerate(self.rows):
            token = int(tokens[i])
            row.out.token_ids.append(token)
            row.out.logprobs.append(float(chosen[i]))
            if row.matcher is not None:
                row.matcher.accept_token(token)
            if top is not None and row.request.params.top_logprobs > 0:
                n_top = row.request.params.top_logprobs
                ids, values = top.indices[i, :n_top].tolist(), top.values[i, :n_top].tolist()
                row.out.top_logprobs.append(list(zip(ids, values, strict=True)))
            row.out.finish_reason = self._finish_reason(row, token)
            if row.out.finish_reason is not None:
                row.request.unfinished -= 1
                if row.request.unfinished == 0:
                    _finalize(row.request, self.tokenizer)
                    completed.append(row.request)
        return completed

    def _store_finished(self) -> None:
        """Leave the key/values of rows that just finished in the prefix cache: their
        prompt and answer but its last token (sampled, never run). Not when the weights
        changed while the row ran (its key/values mix two policies)."""
        assert self.prefix_cache is not None
        if not self.can_join():
            return  # sliding-window or other layers: not plain per-position key/values
        for i, row in enumerate(self.rows):
            if row.out.finish_reason is None or row.version != self.weights_version:
                continue
            tokens = [*row.request.prompt_ids, *row.out.token_ids[:-1]]
            if len(tokens) < self.prefix_cache.min_tokens:
                continue
            used = self.mask[i].nonzero().squeeze(1)  # index_select copies
            layers = [
                (layer.keys[i : i + 1, :, used], layer.values[i : i + 1, :, used])
                for layer in self.cache.layers
            ]
            self.prefix_cache.store(tokens, layers, self.weights_version)

    def _finish_reason(self, row: _Row, token: int) -> FinishReason | None:
        params = row.request.params
        if token in self.stop_token_ids and not params.ignore_eos:
            return "stop"
        if token in params.stop_token_ids:
            row.out.stop_reason = token
            return "stop"
        if row.matcher is not None and row.matcher.is_terminated():
            return "stop"
        if params.stop and _find_stop(_decode(self.tokenizer, row.out.token_ids), params.stop):
            return "stop"
        if len(row.out.token_ids) >= row.max_tokens or row.request.cancelled:
            return "length"
        return None

    def _select(self, keep: list[int]) -> None:
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.cache.batch_select_indices(index)
        self.rows = [self.rows[i] for i in keep]
        self.mask, self.positions = self.mask[index], self.positions[index]
        # Columns that are padding in every remaining row (left over from rows that
        # left) cost attention time for nothing: drop them.
        first_used = int(self.mask.any(dim=0).long().argmax())
        if first_used > 0 and self.can_join():
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, first_used:]
                layer.values = layer.values[:, :, first_used:]
            self.mask = self.mask[:, first_used:]

    def _forward(self, tokens: torch.Tensor) -> None:
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        self.positions = self.positions + 1
        out = self.model(
            input_ids=tokens.unsqueeze(1),
            attention_mask=self.mask,
            position_ids=self.positions.unsqueeze(1),
            past_key_values=self.cache,
            use_cache=True,
        )
        self.logits, self.cache = out.logits[:, -1, :].float(), out.past_key_values


def generate_batch(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    requests: list[GenerationRequest],
    *,
    stop_token_ids: frozenset[int],
    max_context: int,
    prefix_cache: PrefixCache | None = None,
) -> list[list[SequenceOutput]]:
    """Generate every request's `n` choices together (no late joiners); request order."""
    engine = BatchEngine(
        model,
        tokenizer,
        stop_token_ids=stop_token_ids,
        max_context=max_context,
        prefix_cache=prefix_cache,
    )
    engine.admit(requests)
    while engine.num_rows:
        engine.step()
    return [r.outputs for r in requests]


def _make_rows(request: GenerationRequest, max_context: int, device: torch.device) -> list[_Row]:
    room = max_context - len(request.prompt_ids)
    if room < 1:
        raise ValueError(
            f"prompt has {len(request.prompt_ids)} tokens; the context holds {max_context}"
        )
    request.outputs = [SequenceOutput() for _ in range(request.params.n)]
    request.unfinished = request.params.n
    rows = []
    for choice, out in enumerate(request.outputs):
        generator = None
        if request.params.seed is not None:
            # Distinct but reproducible streams for the n choices of a seeded request.
            generator = torch.Generator(device=device).manual_seed(request.params.seed + choice)
        matcher = new_matcher(request.grammar) if request.grammar is not None else None
        rows.append(_Row(request, out, min(request.params.max_tokens, room), generator, matcher))
    return rows


def _prefill(
    model: Any, prompts: list[tuple[int, ...]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """Left-pad the prompts and run them once; return last logits, cache and mask."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        input_ids[i, width - len(prompt) :] = torch.tensor(prompt)
        mask[i, width - len(prompt) :] = 1
    # Positions count real tokens only, so a left-padded row sees the same positions
    # as it would alone (and as the trainer's input_pos).
    position_ids = (mask.cumsum(dim=1) - 1).clamp(min=0)
    input_ids, mask, position_ids = input_ids.to(device), mask.to(device), position_ids.to(device)
    out = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=position_ids,
        use_cache=True,
        logits_to_keep=1,  # the prompt's other logits are never needed
    )
    return out.logits[:, -1, :].float(), out.past_key_values, mask


def _prefill_after(
    model: Any, prompt: tuple[int, ...], hit: PrefixHit, device: torch.device
) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """Run the part of `prompt` after its cached prefix; return last logits, cache, mask."""
    # DynamicLayer.update concatenates: the entry's tensors are copied, never written.
    past = DynamicCache(ddp_cache_data=[(k.to(device), v.to(device)) for k, v in hit.layers])
    suffix = torch.tensor([prompt[hit.length :]], dtype=torch.long, device=device)
    mask = torch.ones((1, len(prompt)), dtype=torch.long, device=device)
    position_ids = torch.arange(hit.length, len(prompt), device=device).unsqueeze(0)
    out = model(
        input_ids=suffix,
        attention_mask=mask,
        position_ids=position_ids,
        past_key_values=past,
        use_cache=True,
        logits_to_keep=1,
    )
    return out.logits[:, -1, :].float(), out.past_key_values, mask


def _cat_rows(cache: Any, mask: torch.Tensor, more: Any, more_mask: torch.Tensor) -> torch.Tensor:
    """Append `more`'s rows to `cache` (in place), left-padding the shorter to the same
    length; return the joined mask."""
    length = max(mask.shape[1], more_mask.shape[1])
    for mine, theirs in zip(cache.layers, more.layers, strict=True):
        mine.keys = torch.cat([_left_pad(mine.keys, length), _left_pad(theirs.keys, length)])
        mine.values = torch.cat([_left_pad(mine.values, length), _left_pad(theirs.values, length)])
    return torch.cat([_left_pad(mask, length, dim=1), _left_pad(more_mask, length, dim=1)])


def _left_pad(tensor: torch.Tensor, length: int, dim: int = 2) -> torch.Tensor:
    """Zero-pad `tensor` on the left of `dim` up to `length` (masked positions)."""
    missing = length - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def _find_stop(text: str, stop: tuple[str, ...]) -> tuple[int, str] | None:
    """The earliest stop string in `text` and where it starts, or None."""
    hits = [(text.find(s), s) for s in stop if s and s in text]
    return min(hits) if hits else None


def _decode(tokenizer: PreTrainedTokenizerBase, token_ids: list[int]) -> str:
    return str(tokenizer.decode(token_ids, skip_special_tokens=True))


def _finalize(request: GenerationRequest, tokenizer: PreTrainedTokenizerBase) -> None:
    """Set each choice's text: the end-of-turn token or the request's stop id stays in
    token_ids/logprobs (ART expects it there, as from vLLM) but not in the text; a stop
    string and what follows it are cut off."""
    for out in request.outputs:
        ids = out.token_ids[:-1] if isinstance(out.stop_reason, int) else out.token_ids
        text = _decode(tokenizer, ids)
        hit = _find_stop(text, request.params.stop)
        if hit is not None:
            text, out.stop_reason = text[: hit[0]], hit[1]
        out.text = text
