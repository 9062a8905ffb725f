"""Exact token ids (`return_token_ids`, as vLLM): the built-in server on a tiny Llama,
straight and through the art backend's inference proxy.

The prompt ids must be the ones the model saw (the chat template applied, the generation
prompt included) and each choice's ids the sampled ones, equal to its `token_id:<id>`
logprob entries: ART after 0.5.18 trains on these ids instead of re-tokenizing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from openai.types.chat import ChatCompletion
from tiny_server import serve_tiny, word_tokenizer
from transformers import PreTrainedTokenizerFast

from artfleet_trainer.backends.inference_proxy import InferenceProxy

VOCAB = 64
EOS = 2
KEY = "upstream-key-for-tests"
FLEET_TOKEN = "fleet-token-for-tests"
# Word-level: `w<ii>` is token i (two digits: no special token prefixes another). A role
# marker opens each turn; w04 is the generation prompt.
TEMPLATE = (
    "{% for m in messages %}{{ 'w05' if m['role'] == 'system' else 'w06' }} {{ m['content'] }} "
    "w03 {% endfor %}{% if add_generation_prompt %}w04{% endif %}"
)
MESSAGES = [{"role": "system", "content": "w10 w11"}, {"role": "user", "content": "w12 w13 w14"}]
EXPECTED_PROMPT = [5, 10, 11, 3, 6, 12, 13, 14, 3, 4]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return word_tokenizer(VOCAB, TEMPLATE)


@pytest_asyncio.fixture
async def upstream(tokenizer: PreTrainedTokenizerFast) -> AsyncIterator[str]:
    async with serve_tiny(tokenizer, vocab=VOCAB, eos=EOS, key=KEY) as port:
        yield f"http://127.0.0.1:{port}/v1"


async def _post(url: str, key: str, body: dict[str, Any]) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + "/chat/completions", headers=headers, json=body) as reply,
    ):
        return reply.status, await reply.read()


def _request(**extra: Any) -> dict[str, Any]:
    return {
        "model": "agent@1",
        "messages": MESSAGES,
        "n": 2,
        "max_tokens": 6,
        "logprobs": True,
        "seed": 7,
        **extra,
    }


def _check_token_ids(raw: bytes, tokenizer: PreTrainedTokenizerFast) -> ChatCompletion:
    body = json.loads(raw)
    prompt = tokenizer.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert body["prompt_token_ids"] == list(prompt) == EXPECTED_PROMPT
    completion = ChatCompletion.model_validate(body)
    assert completion.model_extra == {"prompt_token_ids": EXPECTED_PROMPT}
    assert len(completion.choices) == 2
    sampled = 0
    for choice in completion.choices:
        assert choice.logprobs is not None and choice.logprobs.content is not None
        from_logprobs = [int(e.token.removeprefix("token_id:")) for e in choice.logprobs.content]
        assert choice.model_extra == {"token_ids": from_logprobs}
        assert 1 <= len(from_logprobs) <= 6
        sampled += len(from_logprobs)
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == len(EXPECTED_PROMPT)
    assert completion.usage.completion_tokens == sampled
    return completion


async def test_server_returns_the_exact_token_ids_when_asked(
    upstream: str, tokenizer: PreTrainedTokenizerFast
) -> None:
    status, raw = await _post(upstream, KEY, _request(return_token_ids=True))
    assert status == 200, raw
    _check_token_ids(raw, tokenizer)


async def test_server_leaves_token_ids_out_unless_asked(upstream: str) -> None:
    for extra in ({}, {"return_token_ids": False}):
        status, raw = await _post(upstream, KEY, _request(**extra))
        assert status == 200, raw
        body = json.loads(raw)
        assert "prompt_token_ids" not in body
        assert all("token_ids" not in choice for choice in body["choices"])


async def test_token_ids_without_logprobs_still_come(upstream: str) -> None:
    status, raw = await _post(upstream, KEY, _request(return_token_ids=True, logprobs=False))
    assert status == 200, raw
    body = json.loads(raw)
    assert body["prompt_token_ids"] == EXPECTED_PROMPT
    assert all(c["logprobs"] is None and c["token_ids"] for c in body["choices"])


async def test_return_token_ids_must_be_a_bool(upstream: str) -> None:
    status, raw = await _post(upstream, KEY, _request(return_token_ids="yes"))
    assert status == 400
    assert json.loads(raw)["error"]["param"] == "return_token_ids"


async def test_inference_proxy_passes_token_ids_through(
    upstream: str, tokenizer: PreTrainedTokenizerFast
) -> None:
    proxy = InferenceProxy("127.0.0.1", 0, FLEET_TOKEN)
    await proxy.start()
    try:
        proxy.set_upstream(upstream, KEY)
        proxied_url = f"http://127.0.0.1:{proxy.port}/v1"
        # Greedy: the same request gives the same answer, straight or proxied.
        request = _request(return_token_ids=True, temperature=0.0)
        status, raw = await _post(proxied_url, FLEET_TOKEN, request)
        assert status == 200, raw
        proxied = _check_token_ids(raw, tokenizer)
        _, straight_raw = await _post(upstream, KEY, request)
        straight = ChatCompletion.model_validate_json(straight_raw)
        assert [c.model_extra for c in proxied.choices] == [c.model_extra for c in straight.choices]
    finally:
        await proxy.stop()
