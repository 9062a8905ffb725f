"""Tenants (artfleet.contracts.gpu_tenants): one LoRA adapter's memory in the trainer, how
many fit, and vLLM's LoRA flags for serving them."""

from __future__ import annotations

import pytest

from artfleet.contracts.gpu_plan import QWEN3, ModelShape
from artfleet.contracts.gpu_tenants import (
    LORA_STATE_BYTES,
    MAX_LORAS_PER_BATCH,
    VLLM_LORA_RANKS,
    LoraServing,
    lora_serving,
    tenant_bytes,
    tenants_fit,
    vllm_lora_rank,
)

SHAPE = ModelShape.from_config(QWEN3["Qwen3-0.6B"])


def test_lora_state_is_adapter_grad_and_two_moments_in_fp32() -> None:
    assert LORA_STATE_BYTES == 4 * 4


def test_a_tenant_of_qwen3_0_6b_counted_by_hand() -> None:
    # q (1024 -> 2048), k and v (1024 -> 1024), o (2048 -> 1024), gate and up
    # (1024 -> 3072), down (3072 -> 1024): a rank-r LoRA has r x (in + out) per projection.
    per_layer = 32 * ((1024 + 2048) + 2 * (1024 + 1024) + (2048 + 1024) + 2 * (1024 + 3072))
    per_layer += 32 * (3072 + 1024)
    assert tenant_bytes(SHAPE, 32) == 28 * per_layer * 16 == 322_961_408  # 0.30 GiB
    assert tenant_bytes(SHAPE, 8) * 4 == tenant_bytes(SHAPE, 32)


def test_more_free_memory_fits_more_tenants_and_a_larger_rank_fewer() -> None:
    one = tenant_bytes(SHAPE, 32)
    counts = [tenants_fit(n * one // 2, SHAPE, 32) for n in range(12)]
    assert counts == sorted(counts) and counts[-1] == 5  # 11 halves: 5 whole tenants
    assert tenants_fit(one - 1, SHAPE, 32) == 0 and tenants_fit(-one, SHAPE, 32) == 0
    free = 20 * one
    assert tenants_fit(free, SHAPE, 8) > tenants_fit(free, SHAPE, 32) > tenants_fit(free, SHAPE, 64)


@pytest.mark.parametrize(
    ("rank", "served"), [(1, 1), (2, 8), (8, 8), (9, 16), (32, 32), (33, 64), (300, 320)]
)
def test_a_rank_rounds_up_to_one_vllm_accepts(rank: int, served: int) -> None:
    assert vllm_lora_rank(rank) == served and served in VLLM_LORA_RANKS


@pytest.mark.parametrize("rank", [0, 513])
def test_a_rank_vllm_cannot_serve_is_refused(rank: int) -> None:
    with pytest.raises(ValueError, match="vLLM serves ranks"):
        vllm_lora_rank(rank)


def test_lora_serving_for_few_and_many_tenants() -> None:
    assert lora_serving(3, 24) == LoraServing(max_loras=3, max_cpu_loras=4, max_lora_rank=32)
    many = lora_serving(76, 32)
    assert many.max_loras == MAX_LORAS_PER_BATCH and many.max_cpu_loras == 77
    assert lora_serving(0, 8) == LoraServing(1, 1, 8)  # vLLM needs one slot
    for tenants in range(20):
        serving = lora_serving(tenants, 16)
        assert 1 <= serving.max_loras <= MAX_LORAS_PER_BATCH
        assert serving.max_cpu_loras >= serving.max_loras  # vLLM refuses fewer
        assert serving.max_cpu_loras >= tenants + 1
