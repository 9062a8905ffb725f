"""The prefix cache: reuse of earlier turns' key/values, on a tiny random Llama.

With the cache a prompt prefills only what follows its longest cached prefix; the ids
and logprobs must equal those of a full prefill (1e-4), in every batch layout.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import torch
from prometheus_client import REGISTRY
from tiny_llama import tiny_llama
from tokenizers import Tokenizer, models
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from artfleet_trainer.torch_serving.generation import (
    BatchEngine,
    GenerationRequest,
    SamplingParams,
    SequenceOutput,
)
from artfleet_trainer.torch_serving.prefix_cache import BLOCK, PrefixCache

VOCAB = 64
Model = LlamaForCausalLM
Tok = PreTrainedTokenizerFast


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    return tiny_llama(VOCAB, 2)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {f"w{i}": i for i in range(VOCAB)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="w2", pad_token="w1")


def engine_of(model: Model, tokenizer: Tok, cache: PrefixCache | None) -> BatchEngine:
    return BatchEngine(
        model, tokenizer, stop_token_ids=frozenset(), max_context=512, prefix_cache=cache
    )


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens)


def seeded(max_tokens: int, seed: int, n: int = 1) -> SamplingParams:
    return SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=seed, n=n)


def drain(engine: BatchEngine, requests: list[GenerationRequest]) -> list[list[SequenceOutput]]:
    engine.admit(requests)
    while engine.num_rows:
        engine.step()
    return [r.outputs for r in requests]


def words(start: int, count: int) -> list[int]:
    """`count` ids from the vocabulary (3.. so no pad/eos), deterministic."""
    return [3 + (start + 7 * i) % (VOCAB - 3) for i in range(count)]


def assert_same(with_cache: SequenceOutput, without: SequenceOutput) -> None:
    assert with_cache.token_ids == without.token_ids
    torch.testing.assert_close(with_cache.logprobs, without.logprobs, atol=1e-4, rtol=0)


def kv(length: int, fill: float = 1.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((1, 2, length, 4), fill), torch.full((1, 2, length, 4), fill))] * 2


# --- the cache on its own ----------------------------------------------------------------


def test_longest_prefix_is_found_and_capped_before_the_last_token() -> None:
    cache = PrefixCache(1 << 20)
    stored = words(0, 40)
    assert cache.store(stored, kv(40), version=0)
    hit = cache.lookup([*stored, 9, 9], version=0)
    assert hit is not None and hit.length == 40
    assert hit.layers[0][0].shape[2] == 40
    # A prompt equal to the entry: its last token must still be run for its logits.
    hit = cache.lookup(stored, version=0)
    assert hit is not None and hit.length == 39
    # Diverging mid-block: the match ends where the ids differ, not on a block boundary.
    diverging = [*stored[:37], 60, *stored[38:]]
    hit = cache.lookup(diverging, version=0)
    assert hit is not None and hit.length == 37
    assert cache.lookup(words(5, 40), version=0) is None  # no shared block
    assert cache.lookup(stored[:BLOCK], version=0) is None  # shorter than one block + 1
    assert (cache.stats.hits, cache.stats.misses) == (3, 2)
    assert cache.stats.tokens_saved == 40 + 39 + 37


def test_another_version_never_sees_an_entry() -> None:
    cache = PrefixCache(1 << 20)
    tokens = words(0, 40)
    cache.store(tokens, kv(40), version=0)
    assert cache.lookup([*tokens, 5], version=1) is None
    assert not cache.store(tokens, kv(40), version=1)  # not the cache's version
    cache.set_version(1)
    assert len(cache) == 0 and cache.bytes == 0
    assert cache.lookup([*tokens, 5], version=1) is None
    assert cache.store(tokens, kv(40), version=1)
    assert cache.lookup([*tokens, 5], version=1) is not None


def test_lru_eviction_keeps_the_budget() -> None:
    one = sum(k.nbytes + v.nbytes for k, v in kv(32))
    cache = PrefixCache(2 * one)
    before = REGISTRY.get_sample_value("artfleet_trainer_prefix_cache_evictions_total") or 0.0
    a, b, c = words(0, 32), words(1, 32), words(2, 32)
    cache.store(a, kv(32), version=0)
    cache.store(b, kv(32), version=0)
    assert cache.lookup([*a, 3], version=0) is not None  # a is now the most recent
    cache.store(c, kv(32), version=0)  # evicts b, the least recently used
    assert cache.bytes == 2 * one and len(cache) == 2
    assert cache.lookup([*b, 3], version=0) is None
    assert cache.lookup([*a, 3], version=0) is not None
    assert cache.lookup([*c, 3], version=0) is not None
    assert cache.stats.evictions == 1
    after = REGISTRY.get_sample_value("artfleet_trainer_prefix_cache_evictions_total")
    assert after == before + 1
    assert not cache.store(words(3, 200), kv(200), version=0)  # larger than the budget


def test_an_entry_extended_by_a_newer_one_is_dropped() -> None:
    cache = PrefixCache(1 << 20)
    turn1 = words(0, 40)
    turn2 = [*turn1, *words(9, 30)]
    cache.store(turn1, kv(40), version=0)
    cache.store(turn2, kv(70), version=0)
    assert len(cache) == 1
    assert cache.bytes == sum(k.nbytes + v.nbytes for k, v in kv(70))
    hit = cache.lookup([*turn1, 60], version=0)  # a prefix of the kept entry still hits
    assert hit is not None and hit.length == 40
    assert not cache.store(turn2, kv(70), version=0)  # the same sequence: kept once
    cache.clear()
    assert cache.bytes == 0 and len(cache) == 0


def test_a_zero_budget_disables_the_cache(model: Model, tokenizer: Tok) -> None:
    cache = PrefixCache(0)
    assert not cache.enabled
    assert engine_of(model, tokenizer, cache).prefix_cache is None


# --- the engine with and without it ---------------------------------------------------------


def conversation(
    engine: BatchEngine, turns: int, params: SamplingParams
) -> list[tuple[list[int], SequenceOutput]]:
    """A multi-turn episode: each prompt is the last prompt, its answer and a new message."""
    prompt = words(0, 24)
    out: list[tuple[list[int], SequenceOutput]] = []
    for turn in range(turns):
        result = drain(engine, [GenerationRequest(list(prompt), params)])[0][0]
        out.append((list(prompt), result))
        prompt = [*prompt, *result.token_ids, *words(turn + 11, 9)]
    return out


@pytest.mark.parametrize("params", [greedy(6), seeded(6, seed=3)], ids=["greedy", "seeded"])
def test_multi_turn_episode_equals_the_uncached_one(
    model: Model, tokenizer: Tok, params: SamplingParams
) -> None:
    cache = PrefixCache(1 << 24)
    cached = conversation(engine_of(model, tokenizer, cache), 5, params)
    plain = conversation(engine_of(model, tokenizer, None), 5, params)
    for (prompt_c, out_c), (prompt_p, out_p) in zip(cached, plain, strict=True):
        assert prompt_c == prompt_p
        assert_same(out_c, out_p)
    assert cache.stats.misses == 1 and cache.stats.hits == 4
    # Every later turn reuses all of the previous prompt and answer but its last token.
    expected = sum(len(p) + len(o.token_ids) - 1 for p, o in cached[:-1])
    assert cache.stats.tokens_saved == expected
    assert len(cache) == 1  # each turn's entry replaced the previous one


def test_a_mixed_batch_of_hits_misses_and_n_choices(model: Model, tokenizer: Tok) -> None:
    history = words(0, 30)
    first_turn = [
        GenerationRequest(list(history), greedy(5)),
        GenerationRequest(words(4, 20), greedy(5)),
    ]

    def second_turn(outs: list[list[SequenceOutput]]) -> list[GenerationRequest]:
        return [
            GenerationRequest([*history, *outs[0][0].token_ids, 7, 8, 9], greedy(7)),  # hit
            GenerationRequest(words(2, 45), greedy(4)),  # miss, the longest prompt
            GenerationRequest([*words(4, 20), *outs[1][0].token_ids, 5], seeded(5, 1, n=2)),
            GenerationRequest(words(3, 5), greedy(6)),  # miss, the shortest
        ]

    cache = PrefixCache(1 << 24)
    with_engine, without_engine = (
        engine_of(model, tokenizer, cache),
        engine_of(model, tokenizer, None),
    )
    second_with = second_turn(drain(with_engine, first_turn))
    results_with = drain(with_engine, second_with)
    second_without = second_turn(
        drain(without_engine, [GenerationRequest(list(r.prompt_ids), r.params) for r in first_turn])
    )
    results_without = drain(without_engine, second_without)
    assert [r.prompt_ids for r in second_with] == [r.prompt_ids for r in second_without]
    for outs_c, outs_p in zip(results_with, results_without, strict=True):
        assert len(outs_c) == len(outs_p)
        for out_c, out_p in zip(outs_c, outs_p, strict=True):
            assert_same(out_c, out_p)
    assert cache.stats.hits == 2  # the two continued conversations


def test_a_cached_request_joining_a_running_batch(model: Model, tokenizer: Tok) -> None:
    def run(cache: PrefixCache | None) -> list[SequenceOutput]:
        engine = engine_of(model, tokenizer, cache)
        base = words(1, 26)
        first = drain(engine, [GenerationRequest(list(base), greedy(4))])[0][0]
        running = GenerationRequest(words(6, 40), greedy(8))
        engine.admit([running])
        engine.step()
        engine.step()
        joiner = GenerationRequest([*base, *first.token_ids, 4, 5], greedy(6))
        engine.admit([joiner])  # joins with a cached prefix, left-padded to the batch
        while engine.num_rows:
            engine.step()
        return [first, running.outputs[0], joiner.outputs[0]]

    cache = PrefixCache(1 << 24)
    for out_c, out_p in zip(run(cache), run(None), strict=True):
        assert_same(out_c, out_p)
    assert cache.stats.hits == 1


def test_new_weights_invalidate_the_cache(model: Model, tokenizer: Tok) -> None:
    cache = PrefixCache(1 << 24)
    engine = engine_of(model, tokenizer, cache)
    prompt = words(0, 30)
    first = drain(engine, [GenerationRequest(list(prompt), greedy(4))])[0][0]
    assert len(cache) == 1
    engine.weights_changed()
    assert len(cache) == 0 and cache.bytes == 0
    drain(engine, [GenerationRequest([*prompt, *first.token_ids, 9], greedy(3))])
    assert cache.stats.hits == 0 and cache.stats.misses == 2

    # A row prefilled under the old weights and finishing under the new ones is not kept.
    running = GenerationRequest(words(5, 30), greedy(3))
    engine.admit([running])
    engine.step()
    cache.clear()
    engine.weights_changed()
    while engine.num_rows:
        engine.step()
    assert len(cache) == 0


def test_metrics_count_hits_and_tokens(model: Model, tokenizer: Tok) -> None:
    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    hits = sample("artfleet_trainer_prefix_cache_requests_total", result="hit")
    cached = sample("artfleet_trainer_prefix_cache_prompt_tokens_total", kind="cached")
    held = sample("artfleet_trainer_prefix_cache_bytes")
    cache = PrefixCache(1 << 24)
    conversation(engine_of(model, tokenizer, cache), 3, greedy(4))
    assert sample("artfleet_trainer_prefix_cache_requests_total", result="hit") == hits + 2
    assert (
        sample("artfleet_trainer_prefix_cache_prompt_tokens_total", kind="cached")
        == cached + cache.stats.tokens_saved
    )
    assert sample("artfleet_trainer_prefix_cache_bytes") == held + cache.bytes
    cache.clear()
    assert sample("artfleet_trainer_prefix_cache_bytes") == held


def test_the_backend_wires_the_cache_and_a_training_step_invalidates_it(
    tmp_path: Path, tokenizer: Tok
) -> None:
    from artfleet_trainer.torch_backend import train_config, training
    from artfleet_trainer.torch_backend.backend import TorchBackend, _ModelState
    from artfleet_trainer.torch_backend.model_loader import LoadedModel
    from artfleet_trainer.torch_backend.tenants import SharedBase
    from artfleet_trainer.torch_serving.options import TorchServerOptions
    from artfleet_trainer.torch_serving.service import TorchServing

    base = SharedBase("tiny", LoadedModel(tiny_llama(VOCAB, 2), tokenizer, "", 0.0))
    peft_model = base.add("agent", training.lora_config(8), None)
    off = TorchBackend(path=str(tmp_path / "off"), serving=TorchServerOptions(prefix_cache_bytes=0))
    off._worker.shutdown()
    off_serving = cast(TorchServing, off.serving)
    assert (
        off_serving._make_policy("a", peft_model, tokenizer, 0).scheduler.engine.prefix_cache
        is None
    )
    backend = TorchBackend(
        path=str(tmp_path), serving=TorchServerOptions(prefix_cache_bytes=1 << 20)
    )
    try:
        serving = cast(TorchServing, backend.serving)
        serving.attach("agent", peft_model, tokenizer, 0)
        policy = serving._policies["agent"]
        engine = policy.scheduler.engine
        assert engine.prefix_cache is not None and engine.prefix_cache.max_bytes == 1 << 20
        drain(engine, [GenerationRequest(words(0, 30), greedy(3))])
        assert len(engine.prefix_cache) == 1
        trainable = list(peft_model.parameters())
        state = _ModelState(
            cast(Any, SimpleNamespace(name="agent")),
            peft_model,
            tokenizer,
            training.make_optimizer(trainable),
            tmp_path / "agent",
            policy.max_context,
            0,
        )
        config, dev_config = train_config.build_train_configs(5e-6, {})
        result = backend._train_sync(state, [], config, dev_config)  # nothing to train
        assert result.step == 1 and policy.step == 1
        assert engine.weights_version == 1
        assert len(engine.prefix_cache) == 0 and engine.prefix_cache.version == 1
    finally:
        backend._worker.shutdown()
