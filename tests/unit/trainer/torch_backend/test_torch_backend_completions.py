"""Text completions (`/v1/completions`, as vLLM's) from the built-in server on a tiny Llama:
token-id prompts, the sampled tokens' logprobs and ids, stop ids, prompt logprobs, and
the requests it refuses."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import torch
from openai.types import Completion
from tiny_llama import tiny_llama
from tiny_server import serve_tiny, word_tokenizer
from transformers import PreTrainedTokenizerFast

from artfleet_trainer.torch_serving.completions import parse_completion_request
from artfleet_trainer.torch_serving.protocol import RequestError

VOCAB = 64
EOS = 2
CONTEXT = 128
KEY = "completions-key-for-tests"
PROMPT = [5, 10, 11, 3, 6, 12, 13]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return word_tokenizer(VOCAB, "")


@pytest_asyncio.fixture
async def url(tokenizer: PreTrainedTokenizerFast) -> AsyncIterator[str]:
    async with serve_tiny(tokenizer, vocab=VOCAB, eos=EOS, key=KEY, context=CONTEXT) as port:
        yield f"http://127.0.0.1:{port}/v1/completions"


async def _post(url: str, **body: Any) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, headers=headers, json={"model": "agent@1", **body}) as reply,
    ):
        return reply.status, json.loads(await reply.read())


def _raw_logprobs(tokens: list[int]) -> torch.Tensor:
    """log_softmax of the served model's logits over `tokens` (the same seeded weights)."""
    model = tiny_llama(VOCAB, EOS, max_position_embeddings=256)
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=torch.tensor([tokens])).logits[0].float(), -1)


async def test_token_id_prompt_round_trip(url: str) -> None:
    status, body = await _post(
        url, prompt=PROMPT, max_tokens=6, logprobs=1, return_token_ids=True, seed=3
    )
    assert status == 200, body
    completion = Completion.model_validate(body)
    assert completion.object == "text_completion" and completion.model == "agent@1"
    [choice] = body["choices"]
    assert choice["prompt_token_ids"] == PROMPT
    ids = choice["token_ids"]
    assert 1 <= len(ids) <= 6
    logprobs = choice["logprobs"]
    assert logprobs["tokens"] == [f"token_id:{t}" for t in ids]
    assert len(logprobs["token_logprobs"]) == len(ids)
    assert all(lp <= 0 for lp in logprobs["token_logprobs"])
    for token, top in zip(logprobs["tokens"], logprobs["top_logprobs"], strict=True):
        assert token in top and 1 <= len(top) <= 2  # the sampled token and the most likely
    assert logprobs["text_offset"][0] == 0
    expected = _raw_logprobs(PROMPT + ids)[len(PROMPT) - 1 : -1]
    expected = expected.gather(-1, torch.tensor(ids)[:, None])[:, 0]
    torch.testing.assert_close(logprobs["token_logprobs"], expected.tolist(), atol=1e-4, rtol=0)
    assert choice["finish_reason"] == ("stop" if ids[-1] == EOS else "length")
    assert body["usage"] == {
        "prompt_tokens": len(PROMPT),
        "completion_tokens": len(ids),
        "total_tokens": len(PROMPT) + len(ids),
    }


async def test_fields_not_asked_are_null_as_vllm(url: str) -> None:
    status, body = await _post(url, prompt=PROMPT, max_tokens=2)
    assert status == 200, body
    [choice] = body["choices"]
    for key in ("logprobs", "token_ids", "prompt_token_ids", "prompt_logprobs"):
        assert key in choice and choice[key] is None


async def test_n_choices(url: str) -> None:
    status, body = await _post(url, prompt=PROMPT, n=3, max_tokens=5, seed=11, logprobs=0)
    assert status == 200, body
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert all(len(c["logprobs"]["tokens"]) >= 1 for c in body["choices"])
    assert body["usage"]["completion_tokens"] == sum(
        len(c["logprobs"]["tokens"]) for c in body["choices"]
    )


async def test_a_stop_token_id_stops_and_stays_in_the_ids(url: str) -> None:
    greedy = {"prompt": PROMPT, "temperature": 0, "return_token_ids": True, "ignore_eos": True}
    status, body = await _post(url, max_tokens=3, **greedy)
    assert status == 200, body
    first = body["choices"][0]["token_ids"][0]
    status, body = await _post(url, max_tokens=8, stop_token_ids=[first], **greedy)
    assert status == 200, body
    [choice] = body["choices"]
    assert choice["token_ids"] == [first]
    assert (choice["finish_reason"], choice["stop_reason"], choice["text"]) == ("stop", first, "")


async def test_max_tokens_ends_with_length(url: str) -> None:
    status, body = await _post(url, prompt=PROMPT, max_tokens=3, ignore_eos=True, top_k=5)
    assert status == 200, body
    [choice] = body["choices"]
    assert choice["finish_reason"] == "length" and choice["stop_reason"] is None
    assert body["usage"]["completion_tokens"] == 3


async def test_prompt_logprobs_first_none_then_each_prompt_token(url: str) -> None:
    status, body = await _post(url, prompt=PROMPT, max_tokens=1, prompt_logprobs=1)
    assert status == 200, body
    scored = body["choices"][0]["prompt_logprobs"]
    assert len(scored) == len(PROMPT) and scored[0] is None
    raw = _raw_logprobs(PROMPT)
    for position, entry in enumerate(scored[1:], start=1):
        token = PROMPT[position]
        mine = entry[str(token)]
        expected = float(raw[position - 1, token])
        assert mine["logprob"] == pytest.approx(expected, abs=1e-4)
        assert mine["rank"] == int((raw[position - 1] >= raw[position - 1, token]).sum())
        assert mine["decoded_token"] == f"w{token:02d}"
        best = int(raw[position - 1].argmax())
        assert entry[str(best)]["rank"] == 1 and 1 <= len(entry) <= 2


async def test_a_string_prompt_is_tokenized(url: str) -> None:
    status, body = await _post(url, prompt="w10 w11 w12", max_tokens=1, return_token_ids=True)
    assert status == 200, body
    assert body["choices"][0]["prompt_token_ids"] == [10, 11, 12]  # no BOS in this tokenizer


@pytest.mark.parametrize(
    "prompt", [[[5, 6], [7]], ["w10", "w11"], [], "", 5, None, [5, True], [-1], [VOCAB + 3]]
)
async def test_bad_prompts_are_400_naming_prompt(url: str, prompt: Any) -> None:
    status, body = await _post(url, prompt=prompt)
    assert status == 400, body
    assert body["error"]["param"] == "prompt"


async def test_a_prompt_filling_the_context_is_refused(url: str) -> None:
    status, body = await _post(url, prompt=[7] * CONTEXT)
    assert status == 400
    assert (body["error"]["code"], body["error"]["param"]) == ("context_length_exceeded", "prompt")


async def test_the_model_is_resolved_as_for_chat(url: str) -> None:
    status, body = await _post(url, prompt=PROMPT, max_tokens=1, model="agent")
    assert (status, body["model"]) == (200, "agent@1")
    status, body = await _post(url, prompt=PROMPT, model="ghost@2")
    assert (status, body["error"]["code"]) == (404, "model_not_found")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stop_token_ids", [1, "x"]),
        ("top_k", -2),
        ("logprobs", -1),
        ("logprobs", True),
        ("prompt_logprobs", 21),
        ("ignore_eos", "yes"),
        ("echo", True),
        ("stream", True),
    ],
)
def test_invalid_fields_are_refused_by_name(field: str, value: Any) -> None:
    body = {"model": "agent", "prompt": PROMPT, field: value}
    with pytest.raises(RequestError) as caught:
        parse_completion_request(body, default_max_tokens=9)
    assert caught.value.status == 400 and caught.value.param == field


def test_defaults_and_vllm_extensions() -> None:
    plain = parse_completion_request({"model": "m", "prompt": PROMPT}, default_max_tokens=9)
    assert plain.params.max_tokens == 9 and plain.params.top_k == 0
    assert plain.logprobs is None and plain.params.prompt_logprobs is None
    body = {"model": "m", "prompt": PROMPT, "top_k": -1, "stop_token_ids": [4, 9], "logprobs": 2}
    extended = parse_completion_request(body, default_max_tokens=9)
    assert extended.params.top_k == 0 and extended.params.stop_token_ids == {4, 9}
    assert extended.params.top_logprobs == 2
