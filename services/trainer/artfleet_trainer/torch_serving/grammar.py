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
import re
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import torch
import xgrammar as xgr
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from .tool_calls import TOOL_CALL_END, TOOL_CALL_START, ToolChoice, ToolSpec, call_schema

if TYPE_CHECKING:  # protocol imports generation, which imports this module
    from .protocol import ResponseFormat

# Compiled grammars are reused across requests: a judge sends the same schema every time.
_CACHE_SIZE = 64


class GrammarError(ValueError):
    """A response_format that cannot be compiled (an invalid or unsupported schema).
    `param` names the request field at fault."""

    def __init__(self, message: str, param: str = "response_format") -> None:
        super().__init__(message)
        self.param = param


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
        cached = self._cached(key)
        if cached is not None:
            return cached
        try:
            # json_object means "some JSON object" (OpenAI), not any JSON value. Compact
            # JSON (no free whitespace): a small model cannot pad forever.
            schema = {"type": "object"} if fmt.kind == "json_object" else fmt.schema
            compiled = self._compiler.compile_json_schema(
                json.dumps(schema), any_whitespace=False, strict_mode=True
            )
        except Exception as exc:  # xgrammar raises RuntimeError/ValueError subclasses
            raise GrammarError(f"cannot compile the JSON schema: {exc}") from exc
        self._store(key, compiled)
        return compiled

    def compile_tool_calls(
        self, specs: tuple[ToolSpec, ...], choice: ToolChoice
    ) -> xgr.CompiledGrammar:
        """`tool_choice` required (any of `specs`) or named (that one): the output is
        one Hermes `<tool_call>` block, or several separated by a newline when parallel
        calls are allowed, each a call whose arguments match the function's schema."""
        allowed = [s for s in specs if choice.mode == "required" or s.name == choice.name]
        signature = [[s.name, s.parameters] for s in allowed]
        key = json.dumps(["tools", choice.mode, choice.parallel, signature], sort_keys=True)
        cached = self._cached(key)
        if cached is not None:
            return cached
        calls = xgr.Grammar.union(*(_call_grammar(s, specs.index(s)) for s in allowed))
        start = xgr.Grammar.from_ebnf(f"root ::= {json.dumps(TOOL_CALL_START + chr(10))}")
        end = xgr.Grammar.from_ebnf(f"root ::= {json.dumps(chr(10) + TOOL_CALL_END)}")
        block = xgr.Grammar.concat(start, calls, end)
        if choice.parallel:
            # One or more blocks: EBNF repetition over the block's own rule.
            block = xgr.Grammar.from_ebnf(_repeat_ebnf(str(block)))
        try:
            compiled = self._compiler.compile_grammar(block)
        except Exception as exc:
            raise GrammarError(f"cannot compile the tools' schemas: {exc}", "tools") from exc
        self._store(key, compiled)
        return compiled

    def _cached(self, key: str) -> xgr.CompiledGrammar | None:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        return None

    def _store(self, key: str, compiled: xgr.CompiledGrammar) -> None:
        with self._lock:
            self._cache[key] = compiled
            while len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)


def _call_grammar(spec: ToolSpec, index: int) -> xgr.Grammar:
    try:
        return xgr.Grammar.from_json_schema(
            json.dumps(call_schema(spec)), any_whitespace=False, strict_mode=True
        )
    except Exception as exc:
        raise GrammarError(
            f"cannot compile the parameters schema of {spec.name!r}: {exc}",
            f"tools[{index}].function.parameters",
        ) from exc


def _repeat_ebnf(block_ebnf: str) -> str:
    """Rename the block's root and make a new root: block ("\n" block)*."""
    renamed = re.sub(r"^root ::=", "tool_call_block ::=", block_ebnf, flags=re.MULTILINE)
    renamed = re.sub(r"\broot\b", "tool_call_block", renamed)
    return 'root ::= tool_call_block ("\\n" tool_call_block)*\n' + renamed


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
