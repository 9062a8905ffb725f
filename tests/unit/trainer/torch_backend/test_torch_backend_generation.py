"""Batched generation and dynamic batching on a tiny randomly initialised Llama.

A word-level tokenizer built in memory stands in for a real one (no download); the
engine and scheduler code paths are the real ones.
"""

from __future__ import annotations

import asyncio

import pytest
import torch
from prometheus_client import REGISTRY
from tiny_llama import tiny_llama
from tokenizers import Tokenizer, models
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from artfleet_trainer.torch_backend.worker import TorchWorker
from artfleet_trainer.torch_serving.generation import (
    BatchEngine,
    GenerationRequest,
    SamplingParams,
    SequenceOutput,
    generate_batch,
    stop_token_ids_of,
)
from artfleet_trainer.torch_serving.sampling import top_k_filter
from artfleet_trainer.torch_serving.scheduler import GenerationScheduler

VOCAB = 64
EOS = 2
NO_STOP: frozenset[int] = frozenset()
Model = LlamaForCausalLM
Tok = PreTrainedTokenizerFast


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    return tiny_llama(VOCAB, EOS)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {f"w{i}": i for i in range(VOCAB)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="w2", pad_token="w1")


def greedy(max_tokens: int, stop: tuple[str, ...] = ()) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, stop=stop)


def run(
    model: Model,
    tokenizer: Tok,
    requests: list[GenerationRequest],
    stop: frozenset[int] = NO_STOP,
    max_context: int = 256,
) -> list[list[SequenceOutput]]:
    return generate_batch(model, tokenizer, requests, stop_token_ids=stop, max_context=max_context)


def test_left_padded_batch_equals_each_prompt_alone(model: Model, tokenizer: Tok) -> None:
    short, long = [5, 6, 7], [9, 10, 11, 12, 13, 14, 15]
    alone_short = run(model, tokenizer, [GenerationRequest(short, greedy(6))])[0][0]
    alone_long = run(model, tokenizer, [GenerationRequest(long, greedy(6))])[0][0]
    together = run(
        model, tokenizer, [GenerationRequest(short, greedy(6)), GenerationRequest(long, greedy(6))]
    )
    for alone, batched in [(alone_short, together[0][0]), (alone_long, together[1][0])]:
        assert batched.token_ids == alone.token_ids
        torch.testing.assert_close(batched.logprobs, alone.logprobs, atol=1e-5, rtol=0)


def test_a_request_joining_a_running_batch_equals_it_alone(model: Model, tokenizer: Tok) -> None:
    first, late = [5, 6, 7, 8, 9], [20, 21]
    expected = run(model, tokenizer, [GenerationRequest(late, greedy(5))])[0][0]
    engine = BatchEngine(model, tokenizer, stop_token_ids=NO_STOP, max_context=256)
    engine.admit([GenerationRequest(first, greedy(12))])
    for _ in range(4):
        engine.step()
    joiner = GenerationRequest(late, greedy(5))
    engine.admit([joiner])  # shorter than the running rows: left-padded to their length
    assert engine.num_rows == 2
    while engine.num_rows:
        engine.step()
    assert joiner.outputs[0].token_ids == expected.token_ids
    torch.testing.assert_close(joiner.outputs[0].logprobs, expected.logprobs, atol=1e-5, rtol=0)


def test_logprobs_are_the_raw_distribution_not_the_sampling_one(
    model: Model, tokenizer: Tok
) -> None:
    prompt = [3, 4, 5]
    params = SamplingParams(temperature=0.5, top_p=0.9, max_tokens=6, seed=7)
    out = run(model, tokenizer, [GenerationRequest(prompt, params)])[0][0]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + out.token_ids])).logits[0]
    raw = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1]
    expected = raw.gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0].tolist()
    torch.testing.assert_close(out.logprobs, expected, atol=1e-5, rtol=0)


def test_n_choices_seeds_and_lengths(model: Model, tokenizer: Tok) -> None:
    params = SamplingParams(n=3, temperature=1.0, max_tokens=8, seed=11)
    first = run(model, tokenizer, [GenerationRequest([5, 6], params)])[0]
    again = run(model, tokenizer, [GenerationRequest([5, 6], params)])[0]
    assert len(first) == 3
    assert [o.token_ids for o in first] == [o.token_ids for o in again]  # seeded
    assert len({tuple(o.token_ids) for o in first}) > 1  # each choice its own stream
    assert all(o.finish_reason == "length" and len(o.token_ids) == 8 for o in first)


def test_end_of_turn_token_stops_and_stays_in_the_tokens(model: Model, tokenizer: Tok) -> None:
    every_token = frozenset(range(VOCAB))
    out = run(model, tokenizer, [GenerationRequest([5, 6], greedy(8))], stop=every_token)[0][0]
    assert out.finish_reason == "stop"
    assert len(out.token_ids) == len(out.logprobs) == 1
    assert stop_token_ids_of(model, tokenizer) == frozenset({EOS})


def test_stop_strings_cut_the_text(model: Model, tokenizer: Tok) -> None:
    free = run(model, tokenizer, [GenerationRequest([5, 6], greedy(6))])[0][0]
    second_word = free.text.split()[1]
    stopped = run(model, tokenizer, [GenerationRequest([5, 6], greedy(6, stop=(second_word,)))])
    out = stopped[0][0]
    assert out.finish_reason == "stop"
    assert second_word not in out.text
    assert out.token_ids == free.token_ids[: len(out.token_ids)]


def test_top_k_one_samples_the_most_likely_token(model: Model, tokenizer: Tok) -> None:
    expected = run(model, tokenizer, [GenerationRequest([5, 6], greedy(6))])[0][0]
    params = SamplingParams(n=3, temperature=1.5, top_k=1, max_tokens=6, seed=5)
    for out in run(model, tokenizer, [GenerationRequest([5, 6], params)])[0]:
        assert out.token_ids == expected.token_ids
        torch.testing.assert_close(out.logprobs, expected.logprobs, atol=1e-5, rtol=0)


def test_top_k_filter_keeps_each_rows_k_most_likely() -> None:
    probs = torch.tensor([[0.1, 0.4, 0.3, 0.2], [0.1, 0.4, 0.3, 0.2], [0.25] * 4])
    filtered = top_k_filter(probs, torch.tensor([2, 0, 1]))
    torch.testing.assert_close(filtered[0], torch.tensor([0.0, 4 / 7, 3 / 7, 0.0]))
    torch.testing.assert_close(filtered[1], probs[1])  # 0: no cut
    torch.testing.assert_close(filtered[2], probs[2])  # ties with the k-th all stay


def test_request_stop_ids_stop_and_ignore_eos_goes_past_the_end_of_turn(
    model: Model, tokenizer: Tok
) -> None:
    free = run(model, tokenizer, [GenerationRequest([5, 6], greedy(6))])[0][0]
    first, rest = free.token_ids[0], free.token_ids[1:]
    stop_first = SamplingParams(temperature=0.0, max_tokens=6, stop_token_ids=frozenset({first}))
    out = run(model, tokenizer, [GenerationRequest([5, 6], stop_first)])[0][0]
    assert (out.token_ids, out.finish_reason, out.stop_reason) == ([first], "stop", first)
    assert out.text == ""  # the stop id stays in the ids, not in the text
    # The engine's end-of-turn ids (here: every id) stop nothing with ignore_eos.
    ignore = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    every = frozenset(range(VOCAB))
    out = run(model, tokenizer, [GenerationRequest([5, 6], ignore)], stop=every)[0][0]
    assert out.token_ids == [first, *rest] and out.finish_reason == "length"


def test_a_prompt_longer_than_the_context_is_refused(model: Model, tokenizer: Tok) -> None:
    with pytest.raises(ValueError, match="context"):
        run(model, tokenizer, [GenerationRequest(list(range(3, 13)), greedy(2))], max_context=10)


def _batch_observations_above(limit: str) -> float:
    total = REGISTRY.get_sample_value("artfleet_trainer_batch_size_count") or 0.0
    small = REGISTRY.get_sample_value("artfleet_trainer_batch_size_bucket", {"le": limit}) or 0.0
    return total - small


async def test_scheduler_batches_concurrent_requests_and_survives_errors(
    model: Model, tokenizer: Tok
) -> None:
    worker = TorchWorker(num_threads=1)
    engine = BatchEngine(model, tokenizer, stop_token_ids=NO_STOP, max_context=32)
    scheduler = GenerationScheduler(engine, asyncio.Lock(), worker, batch_window_s=0.05)
    try:
        before = _batch_observations_above("2.0")
        results = await asyncio.gather(
            *[scheduler.generate(GenerationRequest([5, i + 6], greedy(4))) for i in range(4)]
        )
        assert [len(r[0].token_ids) for r in results] == [4, 4, 4, 4]
        assert _batch_observations_above("2.0") > before  # the four ran together
        with pytest.raises(ValueError, match="context"):
            await scheduler.generate(GenerationRequest(list(range(40)), greedy(2)))
        # The failure took nothing else down.
        ok = await scheduler.generate(GenerationRequest([5, 6], greedy(3)))
        assert len(ok[0].token_ids) == 3
    finally:
        await scheduler.close()
        worker.shutdown()
