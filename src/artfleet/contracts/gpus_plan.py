"""The trainer on several GPUs: data-parallel FSDP2 ranks, one a GPU, and vLLM beside them.

Torch-free, like `gpu_plan`, whose per-component formulas it reuses (a row's activations,
vLLM's fixed part and KV cache, a tenant's bytes, the headroom, vLLM's share); `plan_gpu`
stays the one-GPU plan. The trainer runs `world` ranks (`ARTFLEET_TRAIN_WORLD`):

- LoRA (`finetune="lora"`): the frozen bf16 base is sharded over the ranks (1/world of it
  on each, plus the unsharded layer FSDP all-gathers for forward and backward, two at once
  for prefetch); every tenant's fp32 adapter, gradient and AdamW moments are replicated on
  each rank (`gpu_tenants.tenant_bytes`: small).
- Full fine-tuning (`finetune="full"`): every weight trains, with FSDP2's mixed precision
  (bf16 compute, fp32 master, gradients and AdamW state): 2 + 4 + 4 + 8 = 18 bytes a
  parameter, all sharded, plus the gathered layers as above.
- Each rank trains one packed row at a time (`gpu_plan.trainer_row_bytes`).

vLLM runs colocated (on every GPU beside a rank, with `gpu_plan`'s share: what it needs
plus half of what is left) with the least tensor-parallel size `tp` (a power of two that
divides the GPUs) whose GPUs hold it, as GPUs / tp replicas; or split: k whole GPUs of
its own (the least multiple of its tp that holds it, or k given), the other GPUs train.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from artfleet.contracts.gpu_plan import (
    ADAPTER_BYTES,
    H100_80GB_BYTES,
    HEADROOM_FRACTION,
    KV_SEQUENCES,
    TRAINER_LORA_RANK,
    ModelShape,
    VllmLimits,
    _gib,
    _share,
    candidate_lengths,
    trainer_overhead_bytes,
    trainer_row_bytes,
    vllm_fixed_bytes,
)
from artfleet.contracts.gpu_tenants import tenant_bytes
from artfleet.contracts.model_configs import LLAMA31, QWEN3_LARGE

Finetune = Literal["lora", "full"]
FINETUNES: tuple[Finetune, ...] = ("lora", "full")

# The weights in the model's dtype (bf16): the frozen base, or full fine-tuning's compute copy.
PARAM_BYTES = 2
# Full fine-tuning's fp32 master weight, fp32 gradient and AdamW's two fp32 moments.
FULL_STATE_BYTES = 4 + 4 + 8
# The several-GPU table's models: those one GPU does not hold beside vLLM.
MULTI_GPU_MODELS: dict[str, dict[str, Any]] = QWEN3_LARGE | LLAMA31
# FSDP2 all-gathers the next layer while one computes (prefetch): two layers unsharded.
GATHERED_LAYERS = 2


@dataclass(frozen=True)
class TrainerRank:
    """One training rank's memory (bytes), by part."""

    base_shard_bytes: int  # its 1/world of the bf16 weights (LoRA: but the output head)
    head_bytes: int  # LoRA on several ranks: the output head, whole on every rank
    gathered_layer_bytes: int  # GATHERED_LAYERS decoder layers unsharded, bf16
    optimizer_shard_bytes: int  # full: its 1/world of master, gradients, AdamW; LoRA: 0
    tenant_bytes: int  # LoRA: every tenant's adapter and its state, replicated; full: 0
    activation_bytes: int  # one packed row of max_model_len, every layer recomputed
    overhead_bytes: int  # a logits chunk and the CUDA context

    @property
    def total(self) -> int:
        return sum(asdict(self).values())

    def describe(self) -> str:
        parts = {k.removesuffix("_bytes").replace("_", " "): v for k, v in asdict(self).items()}
        return ", ".join(f"{name} {_gib(n)}" for name, n in parts.items() if n)


def trainer_rank(
    shape: ModelShape,
    world: int,
    tokens: int,
    finetune: Finetune,
    lora_rank: int = TRAINER_LORA_RANK,
    tenants: int = 1,
) -> TrainerRank:
    """A training rank of `world` (FSDP2) with a packed row of `tokens`."""
    full = finetune == "full"
    # The LoRA trainer keeps the head whole on each rank (its loss reads the head's weight
    # outside any forward: torch_backend/ranks.py), a copy of its own when tied.
    head = shape.vocab * shape.hidden if world > 1 and not full else 0
    sharded = shape.params() - (0 if shape.tied else head)
    return TrainerRank(
        base_shard_bytes=-(-sharded * PARAM_BYTES // world),
        head_bytes=head * PARAM_BYTES,
        gathered_layer_bytes=GATHERED_LAYERS * shape.layer_params() * PARAM_BYTES,
        optimizer_shard_bytes=-(-shape.params() * FULL_STATE_BYTES // world) if full else 0,
        tenant_bytes=0 if full else tenants * tenant_bytes(shape, lora_rank),
        # Full fine-tuning has no fp32 adapter keeping its own copies of the inputs.
        activation_bytes=trainer_row_bytes(
            shape, tokens, PARAM_BYTES, None if full else ADAPTER_BYTES
        ),
        overhead_bytes=trainer_overhead_bytes(shape),
    )


@dataclass(frozen=True)
class GpusPlan:
    """The trainer's ranks and vLLM on `gpus` GPUs of `gpu_total_bytes` (bytes unless named;
    vLLM's and a rank's bytes are on each of their GPUs)."""

    gpus: int
    gpu_total_bytes: int
    finetune: Finetune
    colocate: bool
    max_model_len: int  # vLLM's, and the longest packed row a rank trains
    world: int  # training ranks, one a GPU (ARTFLEET_TRAIN_WORLD)
    vllm_gpus: int  # colocated: all, shared with the ranks; split: whole GPUs of its own
    vllm_tp: int  # tensor-parallel size: a power of two dividing vllm_gpus
    vllm_replicas: int  # vllm_gpus / vllm_tp
    gpu_memory_utilization: float  # vLLM's share of each of its GPUs
    vllm_bytes: int  # total x gpu_memory_utilization
    vllm_need_bytes: int  # its least: weights/tp, slots, profile run, KV_SEQUENCES sequences
    kv_sequences: int  # sequences of max_model_len its KV cache holds
    rank: TrainerRank
    trainer_rank_bytes: int  # rank.total
    trainer_room_bytes: int  # a rank's GPU less vLLM's share (colocated) and the headroom
    fits: bool
    refusal: str | None  # when it does not fit: the figure that does not, and why

    @property
    def train_gpus(self) -> int:
        return self.world

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"train_gpus": self.train_gpus}

    def summary(self) -> str:
        """One log line."""
        where = "colocated" if self.colocate else f"on {self.vllm_gpus} GPU(s) of its own"
        head = (
            f"{self.finetune} on {self.world} ranks, vLLM {where} (tp {self.vllm_tp} x "
            f"{self.vllm_replicas}), max_model_len {self.max_model_len}: a rank "
            f"{_gib(self.trainer_rank_bytes)} GiB ({self.rank.describe()}) of "
            f"{_gib(self.trainer_room_bytes)}"
        )
        return head if self.fits else f"{head}; DOES NOT FIT: {self.refusal}"


def tp_sizes(gpus: int) -> list[int]:
    """vLLM's tensor-parallel sizes on `gpus` GPUs: the powers of two that divide it."""
    return [2**i for i in range(gpus.bit_length()) if gpus % 2**i == 0]


def plan_gpus(
    config: Mapping[str, Any] | Any,
    gpus: int,
    gpu_bytes: int,
    *,
    finetune: Finetune = "lora",
    colocate: bool = True,
    vllm_gpus: int | None = None,
    lora_rank: int = TRAINER_LORA_RANK,
    tenants: int = 1,
    context: int | None = None,
    max_loras: int = 2,
    max_lora_rank: int = 16,
    limits: VllmLimits | None = None,
) -> GpusPlan:
    """The plan at the longest max_model_len (of `candidate_lengths`, or `context`) at which
    both fit with HEADROOM_FRACTION of each GPU to spare; when none does, the plan at the
    shortest, with `fits` False and its `refusal`. `vllm_gpus`: split only, k whole GPUs
    for vLLM (else the least that hold it). `tenants` LoRA tenants of `lora_rank` on each
    rank; vLLM serves `max_loras` slots of `max_lora_rank` (none in full fine-tuning, whose
    weights vLLM loads whole). Raises ValueError for inputs no plan has."""
    _check(gpus, gpu_bytes, finetune, colocate, vllm_gpus, tenants, context)
    shape = ModelShape.from_config(config)
    vllm = _Vllm(
        shape,
        limits or VllmLimits.defaults_for(gpu_bytes),
        max_loras if finetune == "lora" else 0,
        max_lora_rank,
    )
    lengths = [context] if context else candidate_lengths(shape.max_positions)
    for length in lengths:
        rank = _RankOf(shape, length, finetune, lora_rank, tenants)
        if colocate:
            plan = _colocated(vllm, rank, gpus, gpu_bytes)
        else:
            plan = _split(vllm, rank, gpus, gpu_bytes, vllm_gpus)
        if plan.fits:
            break
    return plan


def _check(
    gpus: int,
    gpu_bytes: int,
    finetune: str,
    colocate: bool,
    vllm_gpus: int | None,
    tenants: int,
    context: int | None,
) -> None:
    if gpus < 1:
        raise ValueError(f"gpus must be at least 1, got {gpus}")
    if gpu_bytes <= 0:
        raise ValueError(f"gpu_bytes must be positive, got {gpu_bytes}")
    if finetune not in FINETUNES:
        raise ValueError(f"finetune must be one of {', '.join(FINETUNES)}, got {finetune!r}")
    if tenants < 1:
        raise ValueError(f"tenants must be at least 1, got {tenants}")
    if context is not None and context < 1:
        raise ValueError(f"context must be at least 1 token, got {context}")
    if colocate:
        if vllm_gpus is not None:
            raise ValueError("vllm_gpus is for a split plan: colocated, vLLM is on every GPU")
        return
    if gpus < 2:
        raise ValueError(
            f"a split plan needs 2 GPUs at least (one for vLLM, one to train), got {gpus}"
        )
    if vllm_gpus is not None and not 1 <= vllm_gpus < gpus:
        raise ValueError(
            f"vllm_gpus must be 1 to {gpus - 1} of the {gpus} GPUs (one at least trains), "
            f"got {vllm_gpus}"
        )


@dataclass(frozen=True)
class _Vllm:
    shape: ModelShape
    limits: VllmLimits
    max_loras: int
    max_lora_rank: int

    def fixed(self, tp: int) -> int:
        return vllm_fixed_bytes(
            self.shape, self.limits, PARAM_BYTES, self.max_loras, self.max_lora_rank, tp
        )

    def need(self, tp: int, length: int) -> int:
        """Each GPU's least at `tp`: the fixed part and KV_SEQUENCES sequences of `length`."""
        return self.fixed(tp) + KV_SEQUENCES * length * self.shape.kv_bytes_per_token(
            PARAM_BYTES, tp
        )

    def sequences(self, tp: int, length: int, share_bytes: int) -> int:
        per_sequence = length * self.shape.kv_bytes_per_token(PARAM_BYTES, tp)
        return max(0, share_bytes - self.fixed(tp)) // per_sequence


@dataclass(frozen=True)
class _RankOf:
    shape: ModelShape
    length: int
    finetune: Finetune
    lora_rank: int
    tenants: int

    def on(self, world: int) -> TrainerRank:
        return trainer_rank(
            self.shape, world, self.length, self.finetune, self.lora_rank, self.tenants
        )


def _colocated(vllm: _Vllm, ranks: _RankOf, gpus: int, gpu_bytes: int) -> GpusPlan:
    """Each GPU: a training rank of `gpus`, and one tensor-parallel part of a vLLM replica."""
    headroom = int(gpu_bytes * HEADROOM_FRACTION)
    rank = ranks.on(gpus)
    room = gpu_bytes - headroom - rank.total  # what the rank leaves vLLM
    sizes = tp_sizes(gpus)
    tp = next((t for t in sizes if vllm.need(t, ranks.length) <= room), sizes[-1])
    need = vllm.need(tp, ranks.length)
    refusal = None
    if rank.total > gpu_bytes - headroom:
        refusal = _rank_refusal(rank, gpus, gpu_bytes - headroom, gpu_bytes)
    elif need > room:
        refusal = (
            f"vLLM needs {_gib(need)} GiB a GPU at tp {tp} (the most of {gpus} GPUs), more "
            f"than the {_gib(room)} GiB a training rank's {_gib(rank.total)} leaves of "
            f"{_gib(gpu_bytes - headroom)} ({_gib(gpu_bytes)} less {HEADROOM_FRACTION:.0%} spare)"
        )
    utilization = _share(need, room - need, gpu_bytes)
    vllm_bytes = math.ceil(gpu_bytes * utilization)
    return GpusPlan(
        gpus=gpus,
        gpu_total_bytes=gpu_bytes,
        finetune=ranks.finetune,
        colocate=True,
        max_model_len=ranks.length,
        world=gpus,
        vllm_gpus=gpus,
        vllm_tp=tp,
        vllm_replicas=gpus // tp,
        gpu_memory_utilization=utilization,
        vllm_bytes=vllm_bytes,
        vllm_need_bytes=need,
        kv_sequences=vllm.sequences(tp, ranks.length, vllm_bytes),
        rank=rank,
        trainer_rank_bytes=rank.total,
        trainer_room_bytes=max(0, gpu_bytes - vllm_bytes - headroom),
        fits=refusal is None,
        refusal=refusal,
    )


def _split(
    vllm: _Vllm, ranks: _RankOf, gpus: int, gpu_bytes: int, vllm_gpus: int | None
) -> GpusPlan:
    """vLLM on k whole GPUs (its tp's multiple), the other GPUs one training rank each."""
    usable = gpu_bytes - int(gpu_bytes * HEADROOM_FRACTION)
    if vllm_gpus is None:  # k = tp: one replica on the least GPUs that hold it, one left
        sizes = [2**i for i in range((gpus - 1).bit_length())]  # powers of two < gpus
    else:
        sizes = tp_sizes(vllm_gpus)
    tp = next((t for t in sizes if vllm.need(t, ranks.length) <= usable), sizes[-1])
    k = vllm_gpus or tp
    need = vllm.need(tp, ranks.length)
    rank = ranks.on(gpus - k)
    refusal = None
    if need > usable:
        refusal = (
            f"vLLM needs {_gib(need)} GiB a GPU at tp {tp} (the most its {k} of {gpus} GPUs "
            f"allow), more than the {_gib(usable)} GiB of a whole GPU "
            f"({_gib(gpu_bytes)} less {HEADROOM_FRACTION:.0%} spare)"
        )
    elif rank.total > usable:
        refusal = _rank_refusal(rank, gpus - k, usable, gpu_bytes)
    utilization = math.floor((1 - HEADROOM_FRACTION) * 1000) / 1000  # the whole GPU
    vllm_bytes = math.ceil(gpu_bytes * utilization)
    return GpusPlan(
        gpus=gpus,
        gpu_total_bytes=gpu_bytes,
        finetune=ranks.finetune,
        colocate=False,
        max_model_len=ranks.length,
        world=gpus - k,
        vllm_gpus=k,
        vllm_tp=tp,
        vllm_replicas=k // tp,
        gpu_memory_utilization=utilization,
        vllm_bytes=vllm_bytes,
        vllm_need_bytes=need,
        kv_sequences=vllm.sequences(tp, ranks.length, vllm_bytes),
        rank=rank,
        trainer_rank_bytes=rank.total,
        trainer_room_bytes=usable,
        fits=refusal is None,
        refusal=refusal,
    )


def _rank_refusal(rank: TrainerRank, world: int, room: int, gpu_bytes: int) -> str:
    return (
        f"a training rank of {world} needs {_gib(rank.total)} GiB ({rank.describe()}), more "
        f"than the {_gib(room)} GiB it has of a {_gib(gpu_bytes)} GiB GPU"
    )


def markdown_table(
    models: Mapping[str, Mapping[str, Any]] = MULTI_GPU_MODELS,
    gpus: int = 8,
    gpu_total_bytes: int = H100_80GB_BYTES,
) -> str:
    """The docs' several-GPU table: each model on `gpus` GPUs, LoRA and full fine-tuning,
    vLLM colocated and split (`plan_gpus` with its defaults)."""
    rows = [
        "| model | fine-tune | vLLM | max_model_len | GPUs: vLLM / training ranks "
        "| vLLM tp x replicas | vLLM share (GiB a GPU, full-length sequences) "
        "| rank: base shard / head / gathered layers / optimizer shard / tenants / activations "
        "/ logits and context (GiB) | rank: total / room (GiB) | fits |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, config in models.items():
        for finetune in FINETUNES:
            for colocate in (True, False):
                plan = plan_gpus(
                    config, gpus, gpu_total_bytes, finetune=finetune, colocate=colocate
                )
                rows.append(f"| {name} | {finetune} | {_row(plan)} |")
    return "\n".join(rows)


def _row(p: GpusPlan) -> str:
    r = p.rank
    parts = (
        r.base_shard_bytes,
        r.head_bytes,
        r.gathered_layer_bytes,
        r.optimizer_shard_bytes,
        r.tenant_bytes,
        r.activation_bytes,
        r.overhead_bytes,
    )
    cells = [
        "colocated" if p.colocate else "split",
        str(p.max_model_len),
        f"{p.vllm_gpus}{' (shared)' if p.colocate else ''} / {p.world}",
        f"{p.vllm_tp} x {p.vllm_replicas}",
        f"{p.gpu_memory_utilization:g}: {_gib(p.vllm_bytes)} ({p.kv_sequences})",
        " / ".join(_gib(n) for n in parts),
        f"{_gib(p.trainer_rank_bytes)} / {_gib(p.trainer_room_bytes)}",
        "yes" if p.fits else "no",
    ]
    return " | ".join(cells)
