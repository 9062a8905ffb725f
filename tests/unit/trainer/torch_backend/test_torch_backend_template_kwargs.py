"""`chat_template_kwargs` (vLLM's extension) on the built-in server: the variables reach the
chat template when it renders the prompt, as Qwen3's `enable_thinking` does on vLLM (its
template adds an empty think block to the generation prompt when thinking is off)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from tiny_server import serve_tiny, word_tokenizer
from transformers import PreTrainedTokenizerFast

from artfleet_trainer.torch_serving.protocol import RequestError, parse_chat_request

VOCAB = 64
EOS = 2
KEY = "upstream-key-for-tests"
# Word-level: `w<ii>` is token i. With enable_thinking false the generation prompt gets
# w07 w08 (Qwen3's `<think>\n\n</think>\n\n`), as Qwen3's template does.
TEMPLATE = (
    "{% for m in messages %}w06 {{ m['content'] }} w03 {% endfor %}"
    "{% if add_generation_prompt %}w04"
    "{% if enable_thinking is defined and enable_thinking is false %} w07 w08{% endif %}"
    "{% endif %}"
)
MESSAGES = [{"role": "user", "content": "w12 w13"}]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return word_tokenizer(VOCAB, TEMPLATE)


@pytest_asyncio.fixture
async def upstream(tokenizer: PreTrainedTokenizerFast) -> AsyncIterator[str]:
    async with serve_tiny(tokenizer, vocab=VOCAB, eos=EOS, key=KEY) as port:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"


async def _prompt_ids(url: str, **extra: Any) -> tuple[int, Any]:
    body = {"model": "agent@1", "messages": MESSAGES, "max_tokens": 1, "return_token_ids": True}
    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, headers=headers, json={**body, **extra}) as reply,
    ):
        answer = json.loads(await reply.read())
        return reply.status, answer.get("prompt_token_ids", answer)


async def test_template_variables_reach_the_prompt(upstream: str) -> None:
    assert await _prompt_ids(upstream) == (200, [6, 12, 13, 3, 4])
    off = {"enable_thinking": False}
    assert await _prompt_ids(upstream, chat_template_kwargs=off) == (200, [6, 12, 13, 3, 4, 7, 8])
    on = {"enable_thinking": True}
    assert await _prompt_ids(upstream, chat_template_kwargs=on) == (200, [6, 12, 13, 3, 4])


@pytest.mark.parametrize(
    ("value", "says"),
    [("off", "must be an object"), ({"tokenize": False}, "cannot set tokenize")],
)
def test_bad_template_kwargs_are_a_400_naming_the_field(value: Any, says: str) -> None:
    body = {"model": "agent", "messages": MESSAGES, "chat_template_kwargs": value}
    with pytest.raises(RequestError) as info:
        parse_chat_request(body, default_max_tokens=4)
    assert info.value.status == 400 and info.value.param == "chat_template_kwargs"
    assert says in info.value.message
