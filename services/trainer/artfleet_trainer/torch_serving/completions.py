"""OpenAI text completions (`/v1/completions`) as vLLM serves them: request validation
and response building, pure as protocol.py is.

What the Tinker-compatible API's sampler needs, so that one client samples from vLLM and from
this server alike: a prompt of token ids (or a string), vLLM's sampling extensions
(`top_k`, `stop_token_ids`, `ignore_eos`), the sampled tokens' `logprobs`, and vLLM's
`return_token_ids` and `prompt_logprobs`, in vLLM's response shape: every choice
carries `stop_reason`, `token_ids`, `prompt_logprobs` and `prompt_token_ids`, null
unless asked. One prompt per request (no batch of prompts), no streaming, no echo.

Logprob tokens are `token_id:<id>` unless `return_tokens_as_token_ids: false`: the fleet's
vLLM runs with `--return-tokens-as-token-ids`, which makes that its default too.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .generation import SamplingParams, SequenceOutput
from .prompt_logprobs import PromptTokenLogprob
from .protocol import (
    MAX_TOP_LOGPROBS,
    TokenText,
    bad_request,
    clamp_logprob,
    int_field,
    optional_field,
    require_model,
    sampling_params,
)

# Fields that would change what comes back and that this server does not implement:
# refused rather than ignored (false, empty or null pass).
_UNSUPPORTED = (
    "echo", "suffix", "use_beam_search", "logit_bias", "response_format",
    "structured_outputs", "prompt_embeds", "min_tokens", "include_stop_str_in_output",
)  # fmt: skip
MAX_STOP_TOKEN_IDS = 64


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: list[int] | str  # token ids are the model's input as they are
    params: SamplingParams
    logprobs: int | None  # None: none; k: the sampled token's and the k most likely
    add_special_tokens: bool = True  # for a string prompt (the tokenizer's BOS), as vLLM
    return_token_ids: bool = False
    tokens_as_ids: bool = True  # logprob tokens as `token_id:<id>`


def parse_completion_request(body: Any, *, default_max_tokens: int) -> CompletionRequest:
    """Validate a /v1/completions body; raise RequestError(400) on anything wrong."""
    model = require_model(body)
    for key in _UNSUPPORTED:
        if body.get(key):
            raise bad_request(f"'{key}' is not supported by this server", key)
    logprobs = _optional_count(body, "logprobs")
    params = sampling_params(
        body,
        default_max_tokens,
        top_logprobs=logprobs or 0,
        top_k=_top_k(body),
        stop_token_ids=_stop_token_ids(body.get("stop_token_ids")),
        ignore_eos=optional_field(body, "ignore_eos", bool, False),
        prompt_logprobs=_optional_count(body, "prompt_logprobs"),
    )
    return CompletionRequest(
        model,
        _prompt(body.get("prompt")),
        params,
        logprobs,
        optional_field(body, "add_special_tokens", bool, True),
        optional_field(body, "return_token_ids", bool, False),
        optional_field(body, "return_tokens_as_token_ids", bool, True),
    )


def _prompt(value: Any) -> list[int] | str:
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(_is_token_id(v) for v in value):
        return [int(v) for v in value]
    if isinstance(value, list) and value and all(isinstance(v, str | list) for v in value):
        raise bad_request(
            "'prompt' takes one prompt per request: a string or a list of token ids, "
            "not a batch of them",
            "prompt",
        )
    raise bad_request("'prompt' must be a non-empty string or list of token ids", "prompt")


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_prompt_ids(prompt: Sequence[int], vocab_size: int) -> None:
    """Refuse ids outside the model's embedding table (on a GPU one would be a device
    assertion, not an error the request could be told of)."""
    bad = next((t for t in prompt if t >= vocab_size), None)
    if bad is not None:
        raise bad_request(
            f"'prompt' has token id {bad}; this model's vocabulary has {vocab_size} ids", "prompt"
        )


def _optional_count(body: dict[str, Any], key: str) -> int | None:
    """`logprobs`/`prompt_logprobs`: null (none) or how many most likely tokens to add."""
    if body.get(key) is None:
        return None
    return int_field(body, key, 0, 0, MAX_TOP_LOGPROBS)


def _top_k(body: dict[str, Any]) -> int:
    value = int_field(body, "top_k", 0, -1, 1 << 30)
    return max(value, 0)  # vLLM's -1 and 0 both mean no cut


def _stop_token_ids(value: Any) -> frozenset[int]:
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(_is_token_id(v) for v in value):
        raise bad_request("'stop_token_ids' must be a list of token ids", "stop_token_ids")
    if len(value) > MAX_STOP_TOKEN_IDS:
        raise bad_request(
            f"'stop_token_ids' takes at most {MAX_STOP_TOKEN_IDS} ids", "stop_token_ids"
        )
    return frozenset(int(v) for v in value)


def text_completion(
    *,
    model: str,
    outputs: Sequence[SequenceOutput],
    prompt_ids: Sequence[int],
    request: CompletionRequest,
    token_text: TokenText,
    prompt_logprobs: Sequence[PromptTokenLogprob] | None = None,
    created: int | None = None,
) -> dict[str, Any]:
    """The response body of a text completion, in vLLM's schema."""
    ids = [int(t) for t in prompt_ids]
    scored = None if prompt_logprobs is None else prompt_logprobs_body(prompt_logprobs, token_text)
    token_str = _token_str(request.tokens_as_ids, token_text)
    choices = [
        {
            "index": i,
            "text": out.text,
            "logprobs": None
            if request.logprobs is None
            else completion_logprobs(out, request.logprobs, token_str),
            "finish_reason": out.finish_reason or "length",
            "stop_reason": out.stop_reason,
            "token_ids": [int(t) for t in out.token_ids] if request.return_token_ids else None,
            "prompt_logprobs": scored,
            "prompt_token_ids": ids if request.return_token_ids else None,
        }
        for i, out in enumerate(outputs)
    ]
    completion_tokens = sum(len(out.token_ids) for out in outputs)
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": len(ids),
            "completion_tokens": completion_tokens,
            "total_tokens": len(ids) + completion_tokens,
        },
    }


def _token_str(as_ids: bool, token_text: TokenText) -> Callable[[int], str]:
    return (lambda t: f"token_id:{t}") if as_ids else token_text


def completion_logprobs(
    out: SequenceOutput, k: int, token_str: Callable[[int], str]
) -> dict[str, Any]:
    """OpenAI's completions logprobs: per sampled token its string, logprob, offset in
    the joined token strings, and a map of the sampled token and the k most likely."""
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    text_offset: list[int] = []
    offset = 0
    for i, (token_id, logprob) in enumerate(zip(out.token_ids, out.logprobs, strict=True)):
        token = token_str(token_id)
        top = {token: clamp_logprob(logprob)}
        for other, other_logprob in out.top_logprobs[i][:k] if i < len(out.top_logprobs) else []:
            top.setdefault(token_str(other), clamp_logprob(other_logprob))
        tokens.append(token)
        token_logprobs.append(clamp_logprob(logprob))
        top_logprobs.append(top)
        text_offset.append(offset)
        offset += len(token)
    return {
        "text_offset": text_offset,
        "token_logprobs": token_logprobs,
        "tokens": tokens,
        "top_logprobs": top_logprobs,
    }


def prompt_logprobs_body(
    scores: Sequence[PromptTokenLogprob], token_text: TokenText
) -> list[dict[str, dict[str, Any]] | None]:
    """vLLM's `prompt_logprobs`: None for the first token (nothing before it), then per
    position {token id: {logprob, rank, decoded_token}}, the prompt's token first."""
    body: list[dict[str, dict[str, Any]] | None] = [None]
    for score in scores:
        entry = {
            str(score.token_id): _logprob_entry(
                score.token_id, score.logprob, score.rank, token_text
            )
        }
        for rank, (token_id, logprob) in enumerate(score.top, start=1):
            entry.setdefault(str(token_id), _logprob_entry(token_id, logprob, rank, token_text))
        body.append(entry)
    return body


def _logprob_entry(
    token_id: int, logprob: float, rank: int, token_text: TokenText
) -> dict[str, Any]:
    return {"logprob": clamp_logprob(logprob), "rank": rank, "decoded_token": token_text(token_id)}
