"""Structured output (`response_format`) by constrained decoding with xgrammar.

vLLM does the same with xgrammar: the JSON schema is compiled once into a grammar over
the tokenizer's vocabulary, each generated row gets a matcher, and before sampling every
token the grammar cannot accept next is masked out. Only the *sampled* distribution is
masked: reported logprobs stay those of the raw model (see generation.py), so a
constrained turn trains exactly like any other.

A judge such as ART's RULER asks for `{"type": "json_schema", "json_schema": {"schema":
...}}`; `{"type": "json_object"}` means any JSON object; `{"type": "text"}` is the default.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import torch
import xgrammar as xgr
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

if TYPE_CHECKING:  # protocol imports generation, which imports this module
    from .protocol import ResponseFormat

# Compiled grammars are reused across requests: a judge sends the same schema every time.
_CACHE_SIZE = 64


class GrammarError(ValueError):
    """A response_format that cannot be compiled (an invalid or unsupported schema)."""


class GrammarCompiler:
    """Compiles response formats for one tokenizer (thread-safe; compiled grammars cached)."""

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, vocab_size: int, stop_token_ids: frozenset[int]
    ) -> None:
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(stop_token_ids)
        )
        self.vocab_size = vocab_size
        # One thread: the machine's cores belong to the model's forward passes.
        self._compiler = xgr.GrammarCompiler(info, max_threads=1)
        self._cache: OrderedDict[str, xgr.CompiledGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def compile(self, fmt: ResponseFormat) -> xgr.CompiledGrammar:
        key = fmt.key()
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        try:
            # json_object means "some JSON object" (OpenAI), not any JSON value. Compact
            # JSON (no free whitespace): a small model cannot pad forever.
            schema = {"type": "object"} if fmt.kind == "json_object" else fmt.schema
            compiled = self._compiler.compile_json_schema(
                json.dumps(schema), any_whitespace=False, strict_mode=True
            )
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError subclasses
            raise GrammarError(f"cannot compile the JSON schema: {exc}") from exc
        with self._lock:
            self._cache[key] = compiled
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return compiled


def new_matcher(compiled: xgr.CompiledGrammar) -> xgr.GrammarMatcher:
    return xgr.GrammarMatcher(compiled)


def mask_logits(
    logits: torch.Tensor, matchers: list[xgr.GrammarMatcher | None], vocab_size: int
) -> torch.Tensor:
    """A copy of `logits` where each constrained row only allows the tokens its grammar
    accepts next; unconstrained rows (None) are left as they are. `vocab_size` is the
    width of the logits (the model's, which may exceed the tokenizer's: xgrammar treats
    the extra ids as never valid)."""
    rows = [i for i, m in enumerate(matchers) if m is not None]
    if not rows:
        return logits
    bitmask = xgr.allocate_token_bitmask(len(matchers), vocab_size)  # all allowed
    for i in rows:
        matcher = matchers[i]
        assert matcher is not None
        matcher.fill_next_token_bitmask(bitmask, i)
    masked = logits.clone()
    xgr.apply_token_bitmask_inplace(masked, bitmask, indices=rows)
    return masked
