"""How much of a training row's activations to keep for the backward pass, per row.

Activation checkpointing (a decoder layer keeps only its input and recomputes its forward
in the backward pass) trades compute for memory, and recomputing every layer costs a
large share of a step (docs/benchmarks.md, training step cost). So a row keeps all its
activations when they fit the budget
(`activation_budget_bytes`), else checkpoints just enough layers, and only when even
that is not enough, also recomputes the logits chunks (their recompute costs more per
byte freed: the lm head over the whole vocabulary). A budget of 0 checkpoints everything
(the least memory).

The estimate counts the tensors autograd saves in a Llama-style decoder layer with LoRA
on every projection, per token, in the model's dtype: the two RMSNorms' inputs and outputs
(4 x hidden), q/k/v after rotary embedding, the attention output and the o_proj input
(3 x heads x head_dim + 2 x kv), the MLP's gate, silu(gate), up and the down_proj input
(4 x intermediate); a checkpointed layer keeps its input (hidden); the logits keep their
log-softmax (vocab, always fp32). When the adapter's dtype differs from the base's (fp32
LoRA on a bf16 base, precision.py), peft keeps an fp32 copy of each projection's input for
the adapter: 6 x hidden + attention + intermediate more, in the adapter's bytes. For
SmolLM2-135M in fp32 that is 1.27 MB + 0.2 MB per token, which a measured peak bears out
(docs/benchmarks.md).

The budget itself is the device's: on a CPU a fixed 2 GiB (the host's memory is shared
with everything else); on CUDA what the device has free at the start of a step (plus the
blocks this process's allocator holds unused), within the trainer's share of the GPU when
one is set, less a reserve for what is not a row's activations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from artfleet.contracts.gpu_plan import LayerActivations

# CPU: keeps rows of up to ~1450 tokens of SmolLM2-135M whole (bench/train_step_bench.py's
# row is 866); a full packed row of 2048 tokens checkpoints 11 of its 30 layers.
DEFAULT_ACTIVATION_BUDGET_BYTES = 2 * 1024**3
# CUDA: the share of the free memory a row's activations may take; the rest absorbs the
# allocator's fragmentation and the backward pass's transient gradients.
FREE_MEMORY_HEADROOM = 0.8
LOGPROB_BYTES = 4  # the log-softmax over the vocabulary is fp32 (precision.py)


class ActivationSizes(LayerActivations):
    """Bytes per token that the backward pass keeps, for one model: the estimate is the
    kernel's (`artfleet.contracts.gpu_plan.LayerActivations`, which the GPU plan uses for
    the trainer's expected peak); this adds what the trainer asks of it."""

    @classmethod
    def of_model(cls, peft_model: Any) -> ActivationSizes:
        """The sizes for a (peft) model as it is loaded: its base dtype, its adapter's."""
        base = peft_model.get_base_model() if hasattr(peft_model, "get_base_model") else peft_model
        base_bytes = base.get_input_embeddings().weight.element_size()
        trainable = [p for p in peft_model.parameters() if p.requires_grad]
        adapter_bytes = trainable[0].element_size() if trainable else None
        return cls.of(base.config, base_bytes, adapter_bytes, LOGPROB_BYTES)

    def row_bytes(self, tokens: int, plan: RowPlan) -> int:
        """What a row of `tokens` keeps for the backward pass under `plan`."""
        kept = self.layers - plan.checkpointed_layers
        per_token = kept * self.full_layer + plan.checkpointed_layers * self.checkpointed_layer
        if not plan.checkpoint_logits:
            per_token += self.logits
        return tokens * per_token


@dataclass(frozen=True)
class RowPlan:
    checkpointed_layers: int
    checkpoint_logits: bool


def plan_row(tokens: int, sizes: ActivationSizes, budget_bytes: int) -> RowPlan:
    """The fewest recomputations that keep a row of `tokens` within `budget_bytes`."""
    if budget_bytes <= 0:
        return RowPlan(sizes.layers, checkpoint_logits=True)
    saved_per_layer = (sizes.full_layer - sizes.checkpointed_layer) * tokens
    for checkpoint_logits in (False, True):
        plan = RowPlan(0, checkpoint_logits)
        excess = sizes.row_bytes(tokens, plan) - budget_bytes
        if excess <= 0:
            return plan
        layers = -(-excess // saved_per_layer) if saved_per_layer > 0 else sizes.layers + 1
        if layers <= sizes.layers:
            return RowPlan(int(layers), checkpoint_logits)
    return RowPlan(sizes.layers, checkpoint_logits=True)  # over budget even so: the least


@dataclass(frozen=True)
class DeviceMemory:
    """What a CUDA device has for this process at one moment (bytes)."""

    free: int  # the driver's free memory on the device
    reserved_unused: int  # blocks this process's caching allocator holds but does not use
    allocated: int  # what this process's tensors use
    limit: int | None  # the trainer's share of the device (set_per_process_memory_fraction)

    @classmethod
    def of(cls, device: torch.device, memory_fraction: float = 0.0) -> DeviceMemory:
        free, total = torch.cuda.mem_get_info(device)
        allocated = torch.cuda.memory_allocated(device)
        reserved = torch.cuda.memory_reserved(device)
        limit = int(total * memory_fraction) if memory_fraction > 0 else None
        return cls(free, reserved - allocated, allocated, limit)

    def available(self) -> int:
        """What new tensors of this process can still get."""
        available = self.free + self.reserved_unused
        if self.limit is not None:
            available = min(available, self.limit - self.allocated)
        return max(0, available)


def budget_from_memory(memory: DeviceMemory, reserve_bytes: int) -> int:
    """A row's activation budget from the device's memory: a share of what is available,
    less `reserve_bytes` (the logits chunks and transients a row needs besides its
    activations). At least 1 byte: 0 would mean "recompute everything" by choice."""
    return max(1, int(memory.available() * FREE_MEMORY_HEADROOM) - reserve_bytes)


def device_budget(
    device: torch.device, sizes: ActivationSizes, chunk_tokens: int, memory_fraction: float = 0.0
) -> int:
    """The activation budget for one row on `device`, measured now."""
    if device.type != "cuda":
        return DEFAULT_ACTIVATION_BUDGET_BYTES
    # A logits chunk exists up to three times at once: the product, the log-softmax, and
    # the entropy's exp (or their gradients in the backward pass).
    reserve = 3 * chunk_tokens * sizes.logits
    return budget_from_memory(DeviceMemory.of(device, memory_fraction), reserve)


def sizes_and_budget(
    peft_model: Any, configured: int | None, chunk_tokens: int, memory_fraction: float = 0.0
) -> tuple[ActivationSizes, int]:
    """The model's activation sizes and a row's budget: `configured`, else its device's,
    measured now (a GRPO step and an SFT batch each ask once)."""
    sizes = ActivationSizes.of_model(peft_model)
    if configured is not None:
        return sizes, configured
    device = next(p for p in peft_model.parameters() if p.requires_grad).device
    return sizes, device_budget(device, sizes, chunk_tokens, memory_fraction)


def plan_and_apply(peft_model: Any, tokens: int, sizes: ActivationSizes, budget: int) -> RowPlan:
    """Plan a row of `tokens` within `budget` and set the model's layers for it."""
    plan = plan_row(tokens, sizes, budget)
    apply_plan(peft_model, plan)
    return plan


def apply_plan(peft_model: Any, plan: RowPlan) -> None:
    """Checkpoint the first `plan.checkpointed_layers` decoder layers, keep the others.

    transformers' own switch (`activation_checkpointing_enable(every_n_layers=...)`)
    gives each layer the checkpoint function and sets its `gradient_checkpointing` flag;
    the flags are then set per row here (a row's whole forward and backward run under
    one plan: the flag is read in the forward, the recompute is recorded in the graph).
    """
    base = peft_model.get_base_model() if hasattr(peft_model, "get_base_model") else peft_model
    layers = [m for m in base.modules() if isinstance(m, GradientCheckpointingLayer)]
    if plan.checkpointed_layers and not all(
        hasattr(layer, "_gradient_checkpointing_func") for layer in layers
    ):
        base.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    for index, layer in enumerate(layers):
        layer.gradient_checkpointing = index < plan.checkpointed_layers


def checkpointed_layers(peft_model: Any) -> int:
    """How many decoder layers are checkpointed now (tests, logs)."""
    base = peft_model.get_base_model() if hasattr(peft_model, "get_base_model") else peft_model
    return sum(
        1
        for m in base.modules()
        if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing
    )
