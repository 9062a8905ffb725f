"""How one GPU is split between vLLM and the trainer, derived from the model's config.

The one source of vLLM's `gpu_memory_utilization` and `max_model_len` on a GPU shared with
the trainer (the inference service's `auto`, docker-compose.yml, the Kubernetes GPU
overlay and the table in docs/deployment.md all come from `plan_gpu`), and of the trainer's
expected memory. Torch-free: it reads a config.json's keys (a mapping, or an object with
those attributes such as a transformers `PretrainedConfig`) and the GPU's total bytes.

vLLM (0.32, `vllm/v1/worker/gpu_worker.py`) takes `total x gpu_memory_utilization` and
gives its KV cache what is left after the weights, the profile run's peak activations,
CUDA graphs and non-torch memory; it refuses to start when the GPU has less free memory
than that share, or when the KV cache cannot hold one sequence of `max_model_len`.
The trainer (services/trainer, torch backend) holds a bf16 base, an fp32 LoRA adapter with
its gradients and AdamW state, and one packed row's activations at a time. With many LoRA
tenants on that one base (`gpu_tenants`), each adds its own adapter state; the plan counts
how many fit its trainer share (`GpuPlan.tenants`, `plan_tenants`).

`QWEN3` (`model_configs`) holds the Qwen3 dense models' configs for the docs table.
`python -m artfleet.contracts.gpu_plan --markdown` prints the docs table;
`--config <model folder or config.json>` prints one model's plan. The trainer on several
GPUs (FSDP2 ranks, vLLM colocated or on GPUs of its own) is `gpus_plan`, from the same
per-component formulas; `--gpus N` (`--finetune`, `--split`) and `--markdown-multi` print
its plans.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

from artfleet.contracts.gpu_tenants import (
    MAX_LORAS_PER_BATCH,
    TENANT_RANK,
    tenant_bytes,
    tenants_fit,
    vllm_lora_rank,
)
from artfleet.contracts.model_configs import QWEN3
from artfleet.contracts.model_configs import QWEN3_TINY as QWEN3_TINY  # re-exported

MiB = 1024**2
GiB = 1024**3

# nvidia-smi's memory.total for an H100 80GB (SXM/HBM3): 81559 MiB = 79.6 GiB. vLLM's
# share is a fraction of this number (cudaMemGetInfo's total), not of 80e9.
H100_80GB_BYTES = 81559 * MiB

# --- the constants, and why ----------------------------------------------------------------
# Qwen3's native context: its 40960 positions are 32768 of prompt plus 8192 reserved for
# output (the model card); longer needs YaRN. A sane ceiling for any model.
MAX_MODEL_LEN_CAP = 32768
# Below this, agent episodes of a few turns no longer fit (the old fixed default).
MIN_MAX_MODEL_LEN = 2048
# The KV cache holds at least this many sequences of max_model_len at once: vLLM needs 1
# to start; a GRPO group's rollouts run together, mostly far shorter than the limit, so 4
# full-length ones are ~32 episodes at a quarter of it before vLLM preempts.
KV_SEQUENCES = 4
# vLLM besides the weights, the KV cache and the profile run's activations: the CUDA
# context, cuBLAS and FlashInfer workspaces (non-torch memory), and CUDA graphs, which
# vLLM >= 0.21 profiles into its share (captured with and without LoRA: 2 GiB is above
# what 14B needs; a small model's unused part goes to the KV cache).
VLLM_NON_TORCH_BYTES = 1 * GiB
VLLM_CUDA_GRAPH_BYTES = 2 * GiB
# The sampler's profile run over max_num_seqs rows of the vocabulary: fp32 logits, a
# sort's fp32 values and int64 indices (top-k/top-p).
SAMPLER_BYTES_PER_LOGIT = 16
# The trainer: LoRA rank 8 on q/k/v/o/gate/up/down (torch backend's default); the adapter,
# its gradient and AdamW's two moments in fp32 (gpu_tenants.LORA_STATE_BYTES).
TRAINER_LORA_RANK = 8
ADAPTER_BYTES = 4
# Logprobs are computed 512 positions at a time (training.DEFAULT_CHUNK_SIZE); a chunk
# exists as the bf16 product, the fp32 logits and log-softmax, and a gradient of those.
LOGPROB_CHUNK_TOKENS = 512
LOGPROB_CHUNK_BYTES_PER_LOGIT = 2 + 3 * 4
# The trainer's CUDA context, cuBLAS workspaces and the caching allocator's fragmentation.
TRAINER_CONTEXT_BYTES = 3 * GiB // 2
# A packed row's additive attention mask is [S, S] in the model's dtype; building it takes
# four [S, S] bool tensors besides (causal, same group, parent group, allowed).
MASK_BYTES_PER_ENTRY = 2
MASK_BUILD_BYTES_PER_ENTRY = 2 + 4
# Kept free of both: errors in these estimates, and memory other processes hold.
HEADROOM_FRACTION = 0.03
# What both need left over: half more KV cache for vLLM (more episodes at once), half
# activation budget for the trainer (fewer recomputed layers).
LEFTOVER_TO_VLLM = 0.5


def _get(config: Mapping[str, Any] | Any, key: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def _need(config: Mapping[str, Any] | Any, key: str) -> int:
    value = _get(config, key)
    if value is None:
        raise ValueError(f"the model's config has no {key}")
    return int(value)


def dtype_bytes(name: str | None, default: int = 2) -> int:
    """Bytes per value of a dtype name as config.json or vLLM's `--dtype` write it."""
    sizes = {"float32": 4, "fp32": 4, "float": 4, "bfloat16": 2, "bf16": 2}
    sizes |= {"float16": 2, "fp16": 2, "half": 2}
    return sizes.get(str(name).removeprefix("torch."), default) if name else default


@dataclass(frozen=True)
class LayerActivations:
    """Bytes per token that a training row keeps for the backward pass (the trainer's
    `activation_memory.ActivationSizes`): autograd's saved tensors of a Llama-style
    decoder layer with LoRA on every projection. The two RMSNorms' inputs and outputs
    (4 x hidden), q/k/v after rotary, the attention output and the o_proj input
    (3 x heads x head_dim + 2 x kv), the MLP's gate, silu(gate), up and the down_proj
    input (4 x intermediate), in the model's dtype; an adapter in another dtype keeps its
    own copy of each projection's input (6 x hidden + attention + intermediate). A
    checkpointed layer keeps its input; the logits keep their fp32 log-softmax."""

    layers: int
    full_layer: int
    checkpointed_layer: int
    logits: int

    @classmethod
    def of(
        cls,
        config: Mapping[str, Any] | Any,
        bytes_per_float: int = 4,
        adapter_bytes: int | None = None,
        logprob_bytes: int = 4,
    ) -> Self:
        shape = ModelShape.from_config(config)
        attention = shape.heads * shape.head_dim
        kv = shape.kv_heads * shape.head_dim
        floats = 4 * shape.hidden + 3 * attention + 2 * kv + 4 * shape.intermediate
        full_layer = floats * bytes_per_float
        if adapter_bytes is not None and adapter_bytes != bytes_per_float:
            # q/k/v and gate/up each cast the same input again; o_proj and down_proj theirs.
            full_layer += (6 * shape.hidden + attention + shape.intermediate) * adapter_bytes
        return cls(
            layers=shape.layers,
            full_layer=full_layer,
            checkpointed_layer=shape.hidden * bytes_per_float,
            logits=shape.vocab * logprob_bytes,
        )


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer's sizes, from its config.json."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    max_positions: int
    qkv_bias: bool
    qk_norm: bool
    weight_bytes: int  # the checkpoint's own dtype (torch_dtype)

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Any) -> ModelShape:
        text = _get(config, "text_config")
        if _get(config, "hidden_size") is None and text is not None:
            config = text  # a multimodal config keeps the language model's keys here
        hidden = _need(config, "hidden_size")
        heads = _need(config, "num_attention_heads")
        model_type = str(_get(config, "model_type", ""))
        return cls(
            hidden=hidden,
            intermediate=_need(config, "intermediate_size"),
            layers=_need(config, "num_hidden_layers"),
            heads=heads,
            kv_heads=int(_get(config, "num_key_value_heads") or heads),
            head_dim=int(_get(config, "head_dim") or hidden // heads),
            vocab=_need(config, "vocab_size"),
            tied=bool(_get(config, "tie_word_embeddings", False)),
            max_positions=int(_get(config, "max_position_embeddings") or MAX_MODEL_LEN_CAP),
            # Qwen2 has q/k/v biases without saying so; Llama-style configs say so.
            qkv_bias=model_type == "qwen2" or bool(_get(config, "attention_bias", False)),
            qk_norm=model_type.startswith("qwen3"),
            weight_bytes=dtype_bytes(_get(config, "torch_dtype") or _get(config, "dtype")),
        )

    def projections(self) -> list[tuple[int, int]]:
        """(in, out) of q, k, v, o, gate, up, down: the 7 LoRA targets of one layer."""
        attention, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h, i = self.hidden, self.intermediate
        return [(h, attention), (h, kv), (h, kv), (attention, h), (h, i), (h, i), (i, h)]

    def layer_params(self) -> int:
        """One decoder layer's parameters (FSDP's unit: what one all-gather brings)."""
        per_layer = sum(n_in * n_out for n_in, n_out in self.projections())
        per_layer += 2 * self.hidden  # the two RMSNorms
        if self.qkv_bias:
            per_layer += (self.heads + 2 * self.kv_heads) * self.head_dim
        if self.qk_norm:
            per_layer += 2 * self.head_dim
        return per_layer

    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_params() + embeddings + self.hidden  # + the final norm

    def lora_params(self, rank: int) -> int:
        """A rank-`rank` LoRA on all 7 projections of every layer."""
        return self.layers * sum(rank * (n_in + n_out) for n_in, n_out in self.projections())

    def kv_bytes_per_token(self, bytes_per_value: int = 2, tp: int = 1) -> int:
        """On each of `tp` tensor-parallel GPUs: vLLM splits the KV heads over them (and
        replicates a head when there are fewer heads than GPUs)."""
        return self.layers * 2 * -(-self.kv_heads // tp) * self.head_dim * bytes_per_value


@dataclass(frozen=True)
class VllmLimits:
    """vLLM's scheduler limits, which size its profile run (vLLM 0.32's defaults for the
    OpenAI server: `EngineArgs.get_batch_defaults`)."""

    max_num_seqs: int
    max_num_batched_tokens: int

    @classmethod
    def defaults_for(cls, gpu_total_bytes: int) -> VllmLimits:
        if gpu_total_bytes >= 160 * GiB:
            return cls(1024, 16384)
        if gpu_total_bytes >= 70 * GiB:  # H100, H200 (an A100 80GB gets less: we overcount)
            return cls(1024, 8192)
        return cls(256, 2048)


@dataclass(frozen=True)
class GpuPlan:
    """One GPU shared by vLLM and the trainer, for one model (bytes unless named)."""

    gpu_total_bytes: int
    params: int
    weight_bytes_bf16: int
    weight_bytes_fp32: int
    kv_bytes_per_token: int
    max_model_len: int
    gpu_memory_utilization: float
    vllm_bytes: int  # total x gpu_memory_utilization
    vllm_fixed_bytes: int  # weights, LoRA slots, profile-run activations, graphs, context
    max_loras: int  # vLLM's LoRA slots (of max_lora_rank) that vllm_fixed_bytes counts
    max_lora_rank: int
    kv_cache_bytes: int
    kv_sequences: int  # sequences of max_model_len the KV cache holds
    trainer_bytes: int  # what vLLM leaves: the trainer's share
    trainer_memory_fraction: float  # 1 - gpu_memory_utilization
    trainer_fixed_bytes: int  # bf16 weights, LoRA state, a logits chunk, context
    trainer_peak_bytes: int  # fixed + a max_model_len row with every layer recomputed
    # What a row's layers and logits may keep (the trainer's `train_activation_budget_bytes`):
    # its share less the fixed part, a max_model_len row's mask and the headroom.
    trainer_activation_budget_bytes: int
    tenant_rank: int
    # LoRA tenants of tenant_rank its share holds beside the base and one row's peak.
    tenants: int
    fits: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """One log line."""
        return (
            f"max_model_len {self.max_model_len}, gpu_memory_utilization "
            f"{self.gpu_memory_utilization:g} ({_gib(self.vllm_bytes)} GiB of "
            f"{_gib(self.gpu_total_bytes)}: KV cache {_gib(self.kv_cache_bytes)} GiB = "
            f"{self.kv_sequences} full-length sequences), trainer {_gib(self.trainer_bytes)} "
            f"GiB (least peak {_gib(self.trainer_peak_bytes)}, activation budget "
            f"{_gib(self.trainer_activation_budget_bytes)}, room for {self.tenants} "
            f"rank-{self.tenant_rank} tenants){'' if self.fits else ', DOES NOT FIT'}"
        )


def _gib(n: int) -> str:
    return f"{n / GiB:.1f}"


def vllm_fixed_bytes(
    shape: ModelShape,
    limits: VllmLimits,
    weight_bytes: int,
    max_loras: int,
    max_lora_rank: int,
    tp: int = 1,
) -> int:
    """vLLM's memory besides the KV cache, on each of `tp` tensor-parallel GPUs: the
    weights, the LoRA slots and the projections' outputs are split over them; the
    hidden-size buffers, the sampler, CUDA graphs and the context are on each."""
    weights = -(-shape.params() * weight_bytes // tp)
    # `--enable-lora` preallocates max_loras slots of max_lora_rank on every projection.
    lora_slots = -(-max_loras * shape.lora_params(max_lora_rank) * weight_bytes // tp)
    # The profile run: one forward over max_num_batched_tokens (the MLP's gate/up and its
    # activation, q/k/v, a few hidden-size buffers), then the sampler over max_num_seqs rows.
    split = 3 * shape.intermediate + (shape.heads + 2 * shape.kv_heads) * shape.head_dim
    widest = -(-split // tp) + 4 * shape.hidden
    forward = limits.max_num_batched_tokens * widest * weight_bytes
    sampler = limits.max_num_seqs * shape.vocab * SAMPLER_BYTES_PER_LOGIT
    overhead = VLLM_NON_TORCH_BYTES + VLLM_CUDA_GRAPH_BYTES
    return weights + lora_slots + max(forward, sampler) + overhead


def trainer_fixed_bytes(shape: ModelShape, lora_rank: int, base_bytes: int = 2) -> int:
    """The trainer's memory besides a row's activations and mask."""
    weights = shape.params() * base_bytes
    lora = tenant_bytes(shape, lora_rank)  # one tenant
    return weights + lora + trainer_overhead_bytes(shape)


def trainer_overhead_bytes(shape: ModelShape) -> int:
    """What the trainer holds besides weights, their state and a row: a logits chunk and
    the CUDA context."""
    chunk = LOGPROB_CHUNK_TOKENS * shape.vocab * LOGPROB_CHUNK_BYTES_PER_LOGIT
    return chunk + TRAINER_CONTEXT_BYTES


def trainer_shared_bytes(shape: ModelShape, max_model_len: int, base_bytes: int = 2) -> int:
    """What the trainer holds once for all its tenants: the base, a logits chunk, the
    context, and the peak of a row of max_model_len (one step at a time trains)."""
    fixed = trainer_fixed_bytes(shape, 0, base_bytes)
    return fixed + trainer_row_bytes(shape, max_model_len, base_bytes)


def trainer_row_bytes(
    shape: ModelShape,
    tokens: int,
    base_bytes: int = 2,
    adapter_bytes: int | None = ADAPTER_BYTES,
) -> int:
    """The least a packed row of `tokens` needs: every layer recomputed (each keeps its
    input, one layer at a time is recomputed whole), the final hidden states and their
    gradient, and the attention mask (larger while it is built). `adapter_bytes`: the
    LoRA adapter's dtype (None: no adapter, every weight trains)."""
    sizes = LayerActivations.of(_shape_config(shape), base_bytes, adapter_bytes)
    per_token = sizes.layers * sizes.checkpointed_layer + sizes.full_layer
    per_token += 2 * shape.hidden * base_bytes
    training = tokens * per_token + tokens * tokens * MASK_BYTES_PER_ENTRY
    return max(training, tokens * tokens * MASK_BUILD_BYTES_PER_ENTRY)


def _shape_config(shape: ModelShape) -> dict[str, Any]:
    return {
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "vocab_size": shape.vocab,
    }


def candidate_lengths(max_positions: int, cap: int = MAX_MODEL_LEN_CAP) -> list[int]:
    """max_model_len to try, longest first: the model's context capped, then halved down
    to MIN_MAX_MODEL_LEN (or the model's context, when it is shorter)."""
    length = min(max_positions, cap)
    floor = min(length, MIN_MAX_MODEL_LEN)
    lengths = [length]
    while lengths[-1] // 2 >= floor:
        lengths.append(lengths[-1] // 2)
    return lengths


def plan_gpu(
    config: Mapping[str, Any] | Any,
    gpu_total_bytes: int,
    *,
    weight_bytes: int = 2,
    max_loras: int = 2,
    max_lora_rank: int = 16,
    lora_rank: int = TRAINER_LORA_RANK,
    tenant_rank: int = TENANT_RANK,
    limits: VllmLimits | None = None,
    max_model_len: int | None = None,
    gpu_memory_utilization: float | None = None,
) -> GpuPlan:
    """The longest max_model_len (of `candidate_lengths`, or the one given) at which vLLM
    (its weights, KV_SEQUENCES sequences of that length) and the trainer (bf16 base, one
    row of that length with every layer recomputed) fit the GPU with HEADROOM_FRACTION to
    spare. vLLM's share is what it needs plus LEFTOVER_TO_VLLM of what is left (or the share
    given). When even the shortest does not fit: the plan for it, with `fits` False.
    `tenants` counts what the trainer's share would hold instead of its one rank-`lora_rank`
    LoRA: tenants of `tenant_rank`; vLLM's slots stay `max_loras` (`plan_tenants` sizes them)."""
    shape = ModelShape.from_config(config)
    limits = limits or VllmLimits.defaults_for(gpu_total_bytes)
    vllm_fixed = vllm_fixed_bytes(shape, limits, weight_bytes, max_loras, max_lora_rank)
    trainer_fixed = trainer_fixed_bytes(shape, lora_rank)
    kv_token = shape.kv_bytes_per_token(weight_bytes)
    headroom = int(gpu_total_bytes * HEADROOM_FRACTION)
    given = None
    if gpu_memory_utilization is not None:
        given = math.ceil(gpu_total_bytes * gpu_memory_utilization)
    lengths = [max_model_len] if max_model_len else candidate_lengths(shape.max_positions)
    for length in lengths:
        vllm_need = vllm_fixed + KV_SEQUENCES * length * kv_token
        trainer_peak = trainer_fixed + trainer_row_bytes(shape, length)
        leftover = gpu_total_bytes - headroom - vllm_need - trainer_peak
        if given is not None:  # the share is fixed: each side within its part
            leftover = min(given - vllm_need, gpu_total_bytes - given - headroom - trainer_peak)
        if leftover >= 0:
            break
    utilization = gpu_memory_utilization or _share(vllm_need, leftover, gpu_total_bytes)
    vllm_bytes = math.ceil(gpu_total_bytes * utilization)  # as vLLM computes its share
    kv_cache = max(0, vllm_bytes - vllm_fixed)
    trainer_bytes = gpu_total_bytes - vllm_bytes
    mask = length * length * MASK_BYTES_PER_ENTRY
    tenant_room = trainer_bytes - headroom - trainer_shared_bytes(shape, length)
    return GpuPlan(
        gpu_total_bytes=gpu_total_bytes,
        params=shape.params(),
        weight_bytes_bf16=shape.params() * 2,
        weight_bytes_fp32=shape.params() * 4,
        kv_bytes_per_token=kv_token,
        max_model_len=length,
        gpu_memory_utilization=utilization,
        vllm_bytes=vllm_bytes,
        vllm_fixed_bytes=vllm_fixed,
        max_loras=max_loras,
        max_lora_rank=max_lora_rank,
        kv_cache_bytes=kv_cache,
        kv_sequences=kv_cache // (length * kv_token),
        trainer_bytes=trainer_bytes,
        trainer_memory_fraction=round(1 - utilization, 3),
        trainer_fixed_bytes=trainer_fixed,
        trainer_peak_bytes=trainer_peak,
        trainer_activation_budget_bytes=max(0, trainer_bytes - headroom - trainer_fixed - mask),
        tenant_rank=tenant_rank,
        tenants=tenants_fit(tenant_room, shape, tenant_rank),
        fits=leftover >= 0,
    )


def plan_tenants(
    config: Mapping[str, Any] | Any,
    gpu_total_bytes: int,
    *,
    tenant_rank: int = TENANT_RANK,
    **plan_args: Any,
) -> GpuPlan:
    """`plan_gpu` for a trainer of rank-`tenant_rank` tenants, whose vLLM serves them:
    `lora_serving`'s max_loras slots of the rank vLLM rounds `tenant_rank` up to. Each slot
    costs vLLM memory and so the trainer's share, so the slots are the most (of
    MAX_LORAS_PER_BATCH down to 1) that fit and still leave a tenant for each; one when
    none do. `plan_args`: the rest of `plan_gpu`'s keywords."""
    rank = vllm_lora_rank(tenant_rank)
    for slots in range(MAX_LORAS_PER_BATCH, 0, -1):
        plan = plan_gpu(
            config,
            gpu_total_bytes,
            max_loras=slots,
            max_lora_rank=rank,
            tenant_rank=tenant_rank,
            **plan_args,
        )
        if plan.fits and plan.tenants >= slots:
            break
    return plan


def _share(vllm_need: int, leftover: int, gpu_total_bytes: int) -> float:
    """vLLM's gpu_memory_utilization, to 0.001 (as vLLM logs it): rounded up for what it
    needs, down for its part of the leftover."""
    least = math.ceil(vllm_need / gpu_total_bytes * 1000)
    extra = vllm_need + max(0, leftover) * LEFTOVER_TO_VLLM
    return min(1000, max(least, math.floor(extra / gpu_total_bytes * 1000))) / 1000


def fit_max_model_len(
    config: Mapping[str, Any] | Any,
    kv_cache_bytes: int,
    bytes_per_value: int,
    cap: int = MAX_MODEL_LEN_CAP,
) -> int:
    """The longest max_model_len (of `candidate_lengths`) whose KV_SEQUENCES sequences fit
    a KV cache of a fixed size (vLLM's CPU build: VLLM_CPU_KVCACHE_SPACE); the shortest
    candidate when none does."""
    shape = ModelShape.from_config(config)
    lengths = candidate_lengths(shape.max_positions, cap)
    per_token = shape.kv_bytes_per_token(bytes_per_value)
    return next((n for n in lengths if KV_SEQUENCES * n * per_token <= kv_cache_bytes), lengths[-1])


def markdown_table(
    models: Mapping[str, Mapping[str, Any]] = QWEN3, gpu_total_bytes: int = H100_80GB_BYTES
) -> str:
    """The docs' table: each model's plan on one GPU of `gpu_total_bytes`, and how many
    rank-TENANT_RANK tenants its trainer holds at that max_model_len when vLLM serves them
    (`plan_tenants`)."""
    rows = [
        "| model | params | weights bf16 / fp32 (GiB) | KV per token | max_model_len "
        "| vLLM share (GiB) | its KV cache (GiB, full-length sequences) "
        "| trainer: share / least peak / activation budget (GiB) "
        f"| rank-{TENANT_RANK} tenants (vLLM's LoRA slots) | fits |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, config in models.items():
        p = plan_gpu(config, gpu_total_bytes)
        t = plan_tenants(config, gpu_total_bytes, max_model_len=p.max_model_len)
        rows.append(
            f"| {name} | {p.params / 1e9:.2f}B | {_gib(p.weight_bytes_bf16)} / "
            f"{_gib(p.weight_bytes_fp32)} | {p.kv_bytes_per_token // 1024} KiB "
            f"| {p.max_model_len} | {p.gpu_memory_utilization:g} ({_gib(p.vllm_bytes)}) "
            f"| {_gib(p.kv_cache_bytes)} ({p.kv_sequences}) | {_gib(p.trainer_bytes)} / "
            f"{_gib(p.trainer_peak_bytes)} / {_gib(p.trainer_activation_budget_bytes)} "
            f"| {t.tenants} ({t.max_loras}) | {'yes' if p.fits else 'no'} |"
        )
    return "\n".join(rows)


def read_config(path: Path) -> dict[str, Any]:
    """A model folder's config.json (or the file itself)."""
    file = path / "config.json" if path.is_dir() else path
    loaded = json.loads(file.read_text())
    if not isinstance(loaded, dict):
        raise ValueError(f"{file}: not a JSON object")
    return loaded


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI (`gpu_plan_cli`), here so that `python -m artfleet.contracts.gpu_plan` runs it."""
    from artfleet.contracts.gpu_plan_cli import main as cli  # it imports this module

    return cli(argv)


if __name__ == "__main__":
    raise SystemExit(main())
