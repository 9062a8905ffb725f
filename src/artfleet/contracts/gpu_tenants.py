"""Tenants: many LoRA adapters trained and served on one frozen base model.

A tenant is one LoRA adapter with its own rank (a job, or a Tinker training client): in the
trainer it owns an fp32 adapter, its gradient and AdamW's two moments; the bf16 base, the
CUDA context and one step's activations are shared, since one step at a time trains. In
vLLM each tenant's current policy is a LoRA adapter on the same served base.

Pure arithmetic on a model's shape (`gpu_plan.ModelShape`), torch-free like `gpu_plan`,
which counts how many tenants fit the trainer's share of a GPU (`GpuPlan.tenants`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from artfleet.contracts.gpu_plan import ModelShape

# One LoRA parameter in the trainer: the adapter, its gradient and AdamW's two moments,
# each fp32.
LORA_STATE_BYTES = 4 * 4
# The rank the docs table counts tenants of: 4x the trainer's default of 8, a common
# choice for a Tinker client; a smaller one fits more.
TENANT_RANK = 32
# vLLM's `--max-lora-rank` choices (0.32: `vllm/config/lora.py`, `MaxLoRARanks`).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# Adapters in one vLLM batch. Each slot is preallocated at max_lora_rank on every
# projection (a rank-32 slot of Qwen3-14B is 0.24 GiB of bf16, taken from the KV cache) and
# widens every LoRA kernel launch; a GRPO group's rollouts share one adapter, so 8 slots
# already let 8 tenants' groups decode together; the others wait in vLLM's scheduler, which
# swaps adapters in from its CPU cache. 8 is also what the inference engine keeps
# registered today (artfleet_inference.engine.MAX_REGISTERED_ADAPTERS).
MAX_LORAS_PER_BATCH = 8


def tenant_bytes(shape: ModelShape, rank: int) -> int:
    """One tenant's own memory in the trainer: a rank-`rank` LoRA on all 7 projections of
    every layer, LORA_STATE_BYTES a parameter. Nothing else: the activations, the logits
    chunk and the base belong to the step, and one step at a time trains."""
    return shape.lora_params(rank) * LORA_STATE_BYTES


def tenants_fit(trainer_free_bytes: int, shape: ModelShape, rank: int) -> int:
    """How many rank-`rank` tenants fit in `trainer_free_bytes`: the trainer's memory
    beyond what it holds once for all of them (`gpu_plan.trainer_shared_bytes`) and its
    headroom. At run time: the memory free in the trainer's share with the base loaded,
    less one step's peak (a logits chunk and a row of max_model_len)."""
    return max(0, trainer_free_bytes) // tenant_bytes(shape, rank)


@dataclass(frozen=True)
class LoraServing:
    """vLLM's LoRA flags for a number of tenants: `--max-loras`, `--max-cpu-loras`,
    `--max-lora-rank`."""

    max_loras: int  # adapters in one batch: GPU slots, preallocated
    max_cpu_loras: int  # adapters vLLM keeps loaded in host memory
    max_lora_rank: int  # the slots' rank: one of VLLM_LORA_RANKS


def vllm_lora_rank(rank: int) -> int:
    """The least of vLLM's allowed max_lora_rank values that holds a rank-`rank` adapter."""
    if rank < 1 or rank > VLLM_LORA_RANKS[-1]:
        raise ValueError(f"LoRA rank {rank}: vLLM serves ranks 1 to {VLLM_LORA_RANKS[-1]}")
    return VLLM_LORA_RANKS[bisect.bisect_left(VLLM_LORA_RANKS, rank)]


def lora_serving(tenants: int, max_rank: int) -> LoraServing:
    """vLLM's LoRA flags for `tenants` live tenants whose largest rank is `max_rank`. Every
    tenant's current policy stays in vLLM's CPU cache, plus one: a new policy is loaded
    while the one it replaces still serves, so neither is read from disk again."""
    max_loras = max(1, min(tenants, MAX_LORAS_PER_BATCH))  # vLLM needs at least one
    return LoraServing(
        max_loras=max_loras,
        max_cpu_loras=max(max_loras, tenants + 1),  # vLLM refuses fewer than max_loras
        max_lora_rank=vllm_lora_rank(max_rank),
    )
