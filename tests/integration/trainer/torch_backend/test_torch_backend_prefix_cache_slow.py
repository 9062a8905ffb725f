"""The prefix cache with the real SmolLM2-135M: a 3-turn chat, cache on and off.

The prompts are chat-templated conversations (the template re-renders each assistant
turn with the ids that were sampled), so turns 2 and 3 reuse the previous prompt and
answer; ids and logprobs must equal a full prefill's within 1e-4.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from peft import get_peft_model

from artfleet_trainer.torch_backend.model_loader import DEFAULT_MODEL_NAME, load_base_model
from artfleet_trainer.torch_backend.training import lora_config
from artfleet_trainer.torch_serving.generation import (
    BatchEngine,
    GenerationRequest,
    SamplingParams,
    SequenceOutput,
    stop_token_ids_of,
)
from artfleet_trainer.torch_serving.prefix_cache import PrefixCache

pytestmark = pytest.mark.slow

USER_TURNS = ["Name a color.", "Why that one?", "Name another, in one word."]


def chat(
    model: Any, tokenizer: Any, cache: PrefixCache | None, params: SamplingParams
) -> list[tuple[list[int], SequenceOutput]]:
    engine = BatchEngine(
        model,
        tokenizer,
        stop_token_ids=stop_token_ids_of(model.get_base_model(), tokenizer),
        max_context=2048,
        prefix_cache=cache,
    )
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are concise."}]
    turns = []
    for text in USER_TURNS:
        messages.append({"role": "user", "content": text})
        prompt = [
            int(i)
            for i in tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        ]
        request = GenerationRequest(prompt, params)
        engine.admit([request])
        while engine.num_rows:
            engine.step()
        out = request.outputs[0]
        turns.append((prompt, out))
        messages.append({"role": "assistant", "content": out.text})
    return turns


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=0.0, max_tokens=12), SamplingParams(max_tokens=12, seed=7)],
    ids=["greedy", "seeded"],
)
def test_three_turn_chat_has_equal_logprobs_with_and_without_the_cache(
    params: SamplingParams,
) -> None:
    torch.manual_seed(0)
    loaded = load_base_model(DEFAULT_MODEL_NAME)
    model = get_peft_model(loaded.model, lora_config(8)).eval()
    cache = PrefixCache(64 * 1024 * 1024)
    with_cache = chat(model, loaded.tokenizer, cache, params)
    without = chat(model, loaded.tokenizer, None, params)
    for (prompt_c, out_c), (prompt_p, out_p) in zip(with_cache, without, strict=True):
        assert prompt_c == prompt_p
        assert out_c.token_ids == out_p.token_ids
        torch.testing.assert_close(out_c.logprobs, out_p.logprobs, atol=1e-4, rtol=0)
    assert cache.stats.hits == 2 and cache.stats.misses == 1
    # Turns 2 and 3 reuse at least the previous prompt (the answer too when the template
    # re-renders it with the sampled ids).
    assert cache.stats.tokens_saved >= len(with_cache[0][0]) + len(with_cache[1][0])
