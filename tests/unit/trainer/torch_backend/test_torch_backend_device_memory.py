"""Planning for the device the trainer runs on: the dtype, the activation budget from the
device's memory, SFT rows planned like GRPO rows, no CPU thread probe off the CPU."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from peft import get_peft_model
from tiny_llama import tiny_llama

from artfleet_trainer.torch_backend import activation_memory, precision, sft, training, worker
from artfleet_trainer.torch_backend.activation_memory import (
    ActivationSizes,
    DeviceMemory,
    budget_from_memory,
)

GIB = 1024**3


def test_auto_dtype_is_fp32_on_a_cpu_and_names_are_checked() -> None:
    assert precision.resolve_dtype("auto", "cpu") == torch.float32
    assert precision.resolve_dtype("bf16", "cpu") == torch.bfloat16
    assert precision.resolve_dtype("fp32", "cuda") == torch.float32
    with pytest.raises(ValueError, match="fp16"):
        precision.resolve_dtype("fp16", "cpu")


def test_budget_follows_the_device_memory() -> None:
    # 30 GiB free on the device and 2 GiB cached by our allocator: a share of all 32.
    memory = DeviceMemory(free=30 * GIB, reserved_unused=2 * GIB, allocated=10 * GIB, limit=None)
    assert budget_from_memory(memory, reserve_bytes=GIB) == int(32 * GIB * 0.8) - GIB
    # Within the trainer's share: 48 GiB, 10 of them in use, whatever the device has free.
    shared = DeviceMemory(free=60 * GIB, reserved_unused=0, allocated=10 * GIB, limit=48 * GIB)
    assert budget_from_memory(shared, reserve_bytes=0) == int(38 * GIB * 0.8)
    # Nothing left: the least (every layer recomputed), never "unbounded".
    full = DeviceMemory(free=0, reserved_unused=0, allocated=48 * GIB, limit=48 * GIB)
    assert budget_from_memory(full, reserve_bytes=GIB) == 1


def test_a_cpu_keeps_its_fixed_budget() -> None:
    sizes = ActivationSizes.of(tiny_llama(64).config)
    budget = activation_memory.device_budget(torch.device("cpu"), sizes, chunk_tokens=512)
    assert budget == activation_memory.DEFAULT_ACTIVATION_BUDGET_BYTES


def test_sizes_count_the_model_dtype_and_the_adapter_copies() -> None:
    config = tiny_llama(64).config  # hidden 32, 4 heads of 8, 2 kv heads, MLP 64
    fp32 = ActivationSizes.of(config, 4)
    bf16 = ActivationSizes.of(config, 2, adapter_bytes=4)
    layer_floats = 4 * 32 + 3 * 32 + 2 * 16 + 4 * 64
    assert fp32.full_layer == 4 * layer_floats
    # bf16 activations, plus peft's fp32 copies of each projection's input for the adapter.
    assert bf16.full_layer == 2 * layer_floats + 4 * (6 * 32 + 32 + 64)
    assert bf16.checkpointed_layer == 2 * 32
    assert bf16.logits == fp32.logits == 4 * 64  # the log-softmax is fp32 in both


def test_sizes_of_a_bf16_peft_model_read_its_dtypes() -> None:
    model = get_peft_model(tiny_llama(64).bfloat16(), training.lora_config(4))
    sizes = ActivationSizes.of_model(model)
    assert sizes == ActivationSizes.of(model.get_base_model().config, 2, adapter_bytes=4)


def _sft_rows() -> list[sft.SftRow]:
    torch.manual_seed(3)
    ids = torch.randint(1, 64, (24,)).tolist()
    return [sft.SftRow(ids, [False] * 8 + [True] * 16)]


def _sft_grads(budget: int) -> tuple[int, dict[str, torch.Tensor]]:
    model = get_peft_model(tiny_llama(64), training.lora_config(4))
    optimizer = training.make_optimizer([p for p in model.parameters() if p.requires_grad])
    grads: dict[str, torch.Tensor] = {}

    def keep(name: str) -> Any:
        return lambda grad: grads.__setitem__(name, grad.clone())

    for name, param in model.named_parameters():
        if param.requires_grad:
            param.register_hook(keep(name))
    sft.train_batch(model, optimizer, _sft_rows(), 1e-3, activation_budget_bytes=budget)
    return activation_memory.checkpointed_layers(model), grads


def test_sft_rows_get_an_activation_plan() -> None:
    # A long SFT row kept every activation before (an 8B row of 4k tokens: ~46 GiB).
    kept, kept_grads = _sft_grads(budget=GIB)
    recomputed, recomputed_grads = _sft_grads(budget=0)
    assert (kept, recomputed) == (0, 2)
    for name, grad in kept_grads.items():
        torch.testing.assert_close(recomputed_grads[name], grad, atol=1e-6, rtol=1e-5)


def test_the_thread_probe_runs_only_on_a_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int | None] = []

    def probe(configured: int | None = None) -> int:
        calls.append(configured)
        return 1

    monkeypatch.setattr(worker, "training_threads", probe)
    with worker.training_thread_scope("cuda:0"):
        pass
    assert calls == []
    with worker.training_thread_scope("cpu", 1):
        pass
    assert calls == [1]
