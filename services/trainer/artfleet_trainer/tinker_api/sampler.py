"""Sampling for the Tinker-compatible API: token ids in, token ids and logprobs out, through
the policy's OpenAI-compatible `/v1/completions` (the vLLM inference service, or the
torch backend's own server), with one session reused for every call."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from artfleet.contracts.errors import InvalidArgument, Unavailable
from artfleet.v1 import tinker_api_pb2 as pb

DEFAULT_MAX_TOKENS = 256


Endpoint = Callable[[], Awaitable[tuple[str, str]]]


class CompletionsSampler:
    def __init__(self, endpoint: Endpoint, timeout_s: float = 600.0) -> None:
        """`endpoint()`: the OpenAI base URL (ends in /v1) and its key, asked once."""
        self._endpoint = endpoint
        self._url = ""
        self._headers: dict[str, str] = {}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def sample(self, served_name: str, op: pb.SampleOp) -> pb.SampleResult:
        body = request_body(served_name, op)
        if self._session is None:
            base_url, token = await self._endpoint()
            self._url = f"{base_url.rstrip('/')}/completions"
            self._headers = {"Authorization": f"Bearer {token}"}
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        try:
            async with self._session.post(self._url, json=body, headers=self._headers) as reply:
                data = await reply.json(content_type=None)
                status = reply.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise Unavailable(f"the policy's endpoint did not answer: {exc}") from exc
        if status >= 400:
            message = ((data or {}).get("error") or {}).get("message", str(data))
            if status < 500:
                raise InvalidArgument(f"the serving engine refused the sample: {message}")
            raise Unavailable(f"the serving engine failed ({status}): {message}")
        return parse_reply(data, list(op.prompt), op.prompt_logprobs)


def request_body(served_name: str, op: pb.SampleOp) -> dict[str, Any]:
    params = op.params
    body: dict[str, Any] = {
        "model": served_name,
        "prompt": list(op.prompt),
        "n": max(op.num_samples, 1),
        "max_tokens": params.max_tokens or DEFAULT_MAX_TOKENS,
        "temperature": params.temperature,
        "top_p": params.top_p or 1.0,
        "top_k": params.top_k or -1,
        "logprobs": 0,  # the sampled token's own logprob
        "return_token_ids": True,
        "skip_special_tokens": False,
    }
    if params.HasField("seed"):
        body["seed"] = params.seed
    if params.stop_set:
        body["stop"] = list(params.stop_strings)
        body["stop_token_ids"] = list(params.stop_tokens)
        if not params.stop_strings and not params.stop_tokens:
            body["ignore_eos"] = True  # an empty stop list: run to max_tokens
    if op.prompt_logprobs:
        body["prompt_logprobs"] = 0
    return body


def parse_reply(data: dict[str, Any], prompt: list[int], prompt_logprobs: bool) -> pb.SampleResult:
    result = pb.SampleResult()
    choices = sorted(data.get("choices") or [], key=lambda c: int(c.get("index", 0)))
    for choice in choices:
        tokens = [int(t) for t in choice.get("token_ids") or []]
        logprobs = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
        if len(logprobs) != len(tokens):
            raise Unavailable(
                f"the serving engine returned {len(tokens)} tokens and {len(logprobs)} logprobs"
            )
        reason = "length" if choice.get("finish_reason") == "length" else "stop"
        result.sequences.add(tokens=tokens, logprobs=logprobs, stop_reason=reason)
    if prompt_logprobs and choices:
        result.prompt_logprobs.extend(_prompt_logprobs(choices[0].get("prompt_logprobs"), prompt))
    return result


def _prompt_logprobs(entries: list[Any] | None, prompt: list[int]) -> list[float]:
    """vLLM's per-position dicts ({token id: {"logprob": ...}}), the prompt token's own."""
    out = []
    for position, token in enumerate(prompt):
        entry = entries[position] if entries and position < len(entries) else None
        chosen = (entry or {}).get(str(token)) if isinstance(entry, dict) else None
        out.append(float(chosen["logprob"]) if chosen else math.nan)
    return out
