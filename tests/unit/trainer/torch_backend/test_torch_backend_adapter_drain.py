"""Serving across a training step (adapter_versions.py): rows running when the weights
change finish on the old adapter, new requests get the new one and the step that
answered is named; on a tiny random Llama with a real peft LoRA."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import torch
from peft import get_peft_model
from tiny_llama import tiny_llama
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from artfleet_trainer.torch_backend.training import lora_config
from artfleet_trainer.torch_backend.worker import TorchWorker
from artfleet_trainer.torch_serving.adapter_versions import AdapterSnapshot
from artfleet_trainer.torch_serving.generation import (
    BatchEngine,
    GenerationRequest,
    SamplingParams,
    SequenceOutput,
    generate_batch,
)
from artfleet_trainer.torch_serving.scheduler import GenerationScheduler

VOCAB = 64
NO_STOP: frozenset[int] = frozenset()
PROMPT = [5, 9, 11, 7]


@pytest.fixture
def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {f"w{i}": i for i in range(VOCAB)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="w2", pad_token="w1")


@pytest.fixture
def peft_model() -> Any:
    model = get_peft_model(tiny_llama(VOCAB, 2), lora_config(4))
    _perturb(model, seed=1)  # LoRA B starts at zero: give the adapter an effect
    return model.eval()


def _perturb(model: Any, seed: int) -> None:
    """Stands in for an optimizer step: new values in every LoRA tensor, in place."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=generator) * 0.5)


def _greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens)


def _alone(model: Any, tokenizer: PreTrainedTokenizerFast, tokens: int) -> SequenceOutput:
    request = GenerationRequest(list(PROMPT), _greedy(tokens))
    (outputs,) = generate_batch(model, tokenizer, [request], stop_token_ids=NO_STOP, max_context=64)
    return outputs[0]


def _same(a: SequenceOutput, b: SequenceOutput) -> None:
    assert a.token_ids == b.token_ids
    assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5


def test_running_rows_finish_on_the_old_adapter_then_the_new_one_returns(
    peft_model: Any, tokenizer: PreTrainedTokenizerFast
) -> None:
    before = _alone(peft_model, tokenizer, 12)
    engine = BatchEngine(peft_model, tokenizer, stop_token_ids=NO_STOP, max_context=64)
    old_request = GenerationRequest(list(PROMPT), _greedy(12))
    engine.admit([old_request])
    for _ in range(4):
        engine.step()
    old = AdapterSnapshot.take(peft_model)
    _perturb(peft_model, seed=2)  # "training"
    new = AdapterSnapshot.take(peft_model)
    engine.weights_changed(1, old)
    assert engine.drain is not None and engine.served_step == 1
    while engine.num_rows:
        engine.step()
    _same(old_request.outputs[0], before)  # one policy from the first token to the last
    assert old_request.served_step == 0
    assert engine.drain is None  # the last old row finished: the new tensors are back
    now = AdapterSnapshot.take(peft_model)
    assert all(torch.equal(now.tensors[k], v) for k, v in new.tensors.items())
    assert not all(torch.equal(now.tensors[k], v) for k, v in old.tensors.items())


def test_without_running_rows_nothing_drains(
    peft_model: Any, tokenizer: PreTrainedTokenizerFast
) -> None:
    engine = BatchEngine(peft_model, tokenizer, stop_token_ids=NO_STOP, max_context=64)
    engine.weights_changed(3, AdapterSnapshot.take(peft_model))
    assert engine.drain is None and engine.served_step == 3


async def test_the_scheduler_finishes_old_rows_before_new_requests_join(
    peft_model: Any, tokenizer: PreTrainedTokenizerFast
) -> None:
    before = _alone(peft_model, tokenizer, 24)
    worker = TorchWorker(num_threads=1)
    engine = BatchEngine(peft_model, tokenizer, stop_token_ids=NO_STOP, max_context=64)
    gate = asyncio.Lock()
    scheduler = GenerationScheduler(engine, gate, worker, max_steps_per_slice=2)

    def train() -> None:  # what TorchBackend._train_sync does around its optimizer step
        old = AdapterSnapshot.take(peft_model) if engine.num_rows else None
        _perturb(peft_model, seed=2)
        engine.weights_changed(1, old)

    try:
        old_task = asyncio.create_task(
            scheduler.generate(GenerationRequest(list(PROMPT), _greedy(24)))
        )
        deadline = time.monotonic() + 30
        while engine.num_rows == 0:  # until the old request runs
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        async with gate:
            assert engine.num_rows == 1
            await worker.run(train)
        after_request = GenerationRequest(list(PROMPT), _greedy(24))
        new_outputs = await scheduler.generate(after_request)
        old_outputs = await old_task
        _same(old_outputs[0], before)
        assert after_request.served_step == 1
        _same(new_outputs[0], _alone(peft_model, tokenizer, 24))
    finally:
        await scheduler.close()
        worker.shutdown()
