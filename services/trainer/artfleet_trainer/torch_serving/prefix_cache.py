"""Prefix cache: key/values of token sequences already run, reused by later prompts.

An agent's turn t+1 prompt is its turn-t prompt, the answer it generated and a new
user/tool message (the chat template re-renders the assistant turn with the very ids that
were sampled), and the episodes of a group share their first prompt. Re-running those
prefixes costs the prefill time of the whole history at every turn, and prefill on a
few CPU cores is slow (docs/benchmarks.md). The engine stores each finished row's
key/values (prompt + generated ids but the last, which was sampled and never run) here;
a new prompt then prefills only what follows its longest cached prefix.

Entries are keyed by the weights version: after a training step every entry is stale
(key/values depend on the LoRA weights), so `set_version` drops them, and a lookup or
store under another version never touches them.

Lookup: every entry is indexed by the hashes of its block-aligned prefixes (one chained
hash per `BLOCK` tokens); the deepest block of the prompt found in the index gives the
candidates, whose ids are then compared token by token (so hash collisions are harmless
and the match need not end on a block boundary). Memory: the entries' tensors are
counted against `max_bytes`, least recently used entries go first; an entry that is a
prefix of a newer one is dropped when the newer one is stored (it adds nothing).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .metrics import (
    PREFIX_CACHE_BYTES,
    PREFIX_CACHE_ENTRIES,
    PREFIX_CACHE_EVICTIONS,
    PREFIX_CACHE_REQUESTS,
    PREFIX_CACHE_TOKENS,
)
from .options import DEFAULT_PREFIX_CACHE_BYTES

BLOCK = 16

# Per layer: (keys, values), each [1, kv heads, tokens, head dim].
LayerKV = tuple[torch.Tensor, torch.Tensor]


@dataclass(eq=False)
class _Entry:
    id: int
    version: int
    tokens: tuple[int, ...]
    layers: list[LayerKV]
    nbytes: int
    keys: list[int] = field(default_factory=list)  # its block hashes in the index


@dataclass(frozen=True)
class PrefixHit:
    """The first `length` tokens of a prompt and their key/values (views of an entry)."""

    length: int
    layers: list[LayerKV]


@dataclass
class PrefixCacheStats:
    hits: int = 0
    misses: int = 0
    tokens_saved: int = 0  # prompt tokens taken from the cache
    tokens_computed: int = 0  # prompt tokens prefilled
    evictions: int = 0


def _block_hashes(tokens: Sequence[int], version: int) -> list[int]:
    """One chained hash per full block: hashes[k] covers tokens[: (k + 1) * BLOCK]."""
    hashes, h = [], hash(("prefix-cache", version))
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        h = hash((h, *tokens[start : start + BLOCK]))
        hashes.append(h)
    return hashes


def _common_prefix(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    n = min(len(a), len(b))
    i = start
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixCache:
    """LRU map from token prefixes (of one weights version) to their key/values."""

    def __init__(
        self, max_bytes: int = DEFAULT_PREFIX_CACHE_BYTES, *, min_tokens: int = BLOCK
    ) -> None:
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens  # shorter matches are not worth a separate prefill
        self.version = 0
        self.bytes = 0
        self.stats = PrefixCacheStats()
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # LRU first
        self._index: dict[int, dict[int, None]] = {}  # block hash -> entry ids (ordered)
        self._ids = itertools.count()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def __len__(self) -> int:
        return len(self._entries)

    def set_version(self, version: int) -> None:
        """New weights: nothing cached before can be reused."""
        if version != self.version:
            self.clear()
            self.version = version

    def clear(self) -> None:
        for entry in list(self._entries.values()):
            self._remove(entry)

    def lookup(self, prompt: Sequence[int], version: int) -> PrefixHit | None:
        """The longest cached prefix of `prompt` (at most all but its last token, whose
        logits the caller needs), or None. Counts a hit or a miss."""
        hit = self._find(prompt, version) if self.enabled else None
        if hit is None:
            self.record(hits=0, saved=0, computed=len(prompt))
        else:
            self.record(hits=1, saved=hit.length, computed=len(prompt) - hit.length)
        return hit

    def record(self, *, hits: int, saved: int, computed: int) -> None:
        if hits:
            self.stats.hits += 1
            PREFIX_CACHE_REQUESTS.labels(result="hit").inc()
        else:
            self.stats.misses += 1
            PREFIX_CACHE_REQUESTS.labels(result="miss").inc()
        self.stats.tokens_saved += saved
        self.stats.tokens_computed += computed
        PREFIX_CACHE_TOKENS.labels(kind="cached").inc(saved)
        PREFIX_CACHE_TOKENS.labels(kind="computed").inc(computed)

    def _find(self, prompt: Sequence[int], version: int) -> PrefixHit | None:
        if version != self.version:
            return None
        limit = len(prompt) - 1
        hashes = _block_hashes(prompt[:limit], version)
        for depth in range(len(hashes) - 1, -1, -1):
            candidates = self._index.get(hashes[depth])
            if not candidates:
                continue
            best: tuple[int, _Entry] | None = None
            for entry_id in reversed(candidates):  # the most recent first
                entry = self._entries[entry_id]
                length = min(_common_prefix(entry.tokens, prompt), limit)
                if best is None or length > best[0]:
                    best = (length, entry)
            assert best is not None
            length, entry = best
            if length < max(self.min_tokens, 1):
                return None  # a hash collision or a too short match
            self._entries.move_to_end(entry.id)
            layers = [(k[:, :, :length], v[:, :, :length]) for k, v in entry.layers]
            return PrefixHit(length, layers)
        return None

    def store(self, tokens: Sequence[int], layers: list[LayerKV], version: int) -> bool:
        """Keep `layers` (key/values of exactly `tokens`, batch 1) if it fits; True if kept."""
        if not self.enabled or version != self.version or len(tokens) < self.min_tokens:
            return False
        length = layers[0][0].shape[2]
        if length != len(tokens):
            raise ValueError(f"{length} cached positions for {len(tokens)} tokens")
        nbytes = sum(k.nbytes + v.nbytes for k, v in layers)
        if nbytes > self.max_bytes:
            return False
        tokens = tuple(tokens)
        hashes = _block_hashes(tokens, version)
        # Entries that are prefixes of this one (an episode's earlier turns) add nothing.
        superseded: dict[int, _Entry] = {}
        for h in hashes:
            for entry_id in self._index.get(h, {}):
                entry = self._entries[entry_id]
                if len(entry.tokens) <= len(tokens) and tokens[: len(entry.tokens)] == entry.tokens:
                    superseded[entry_id] = entry
        if any(len(e.tokens) == len(tokens) for e in superseded.values()):
            for entry in superseded.values():  # the same sequence again: refresh it only
                if len(entry.tokens) == len(tokens):
                    self._entries.move_to_end(entry.id)
            return False
        for entry in superseded.values():
            self._remove(entry)
        while self._entries and self.bytes + nbytes > self.max_bytes:
            self._remove(next(iter(self._entries.values())))
            self.stats.evictions += 1
            PREFIX_CACHE_EVICTIONS.inc()
        entry = _Entry(next(self._ids), version, tokens, layers, nbytes, hashes)
        self._entries[entry.id] = entry
        for h in hashes:
            self._index.setdefault(h, {})[entry.id] = None
        self.bytes += nbytes
        PREFIX_CACHE_BYTES.inc(nbytes)
        PREFIX_CACHE_ENTRIES.inc()
        return True

    def _remove(self, entry: _Entry) -> None:
        del self._entries[entry.id]
        for h in entry.keys:
            ids = self._index.get(h)
            if ids is not None:
                ids.pop(entry.id, None)
                if not ids:
                    del self._index[h]
        self.bytes -= entry.nbytes
        PREFIX_CACHE_BYTES.dec(entry.nbytes)
        PREFIX_CACHE_ENTRIES.dec()
