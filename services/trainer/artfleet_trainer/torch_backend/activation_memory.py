"""How much of a training row's activations to keep for the backward pass, per row.

Activation checkpointing (a decoder layer keeps only its input and recomputes its forward
in the backward pass) trades compute for memory. Recomputing every layer costs about a
quarter of a step: SmolLM2-135M, one packed row of 866 tokens, one thread, CPU time of
forward + backward + AdamW: 11.4-14.8 s with every layer checkpointed, 9.3-9.6 s with
none (2026-11-23). So a row keeps all its activations when they fit the budget
(`activation_budget_bytes`), else checkpoints just enough layers, and only when even
that is not enough, also recomputes the logits chunks (their recompute costs more per
byte freed: the lm head over the whole vocabulary). A budget of 0 checkpoints everything
(the least memory).

The estimate counts the tensors autograd saves in a Llama-style decoder layer with LoRA
on every projection, in fp32 floats per token: the two RMSNorms' inputs and outputs
(4 x hidden), q/k/v after rotary embedding, the attention output and the o_proj input
(3 x heads x head_dim + 2 x kv), the MLP's gate, silu(gate), up and the down_proj input
(4 x intermediate); a checkpointed layer keeps its input (hidden); the logits keep their
log-softmax (vocab). For SmolLM2-135M that is 1.27 MB + 0.2 MB per token; measured on a
row of 866 tokens: 1.24 GB peak above the resting process, estimate 1.27 GB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers.modeling_layers import GradientCheckpointingLayer

# Keeps rows of up to ~1450 tokens of SmolLM2-135M whole (bench/train_step_bench.py's row
# is 866); a full packed row of 2048 tokens checkpoints 11 of its 30 layers.
DEFAULT_ACTIVATION_BUDGET_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class ActivationSizes:
    """Bytes per token that the backward pass keeps, for one model."""

    layers: int
    full_layer: int  # a layer whose activations are kept
    checkpointed_layer: int  # a checkpointed layer (its input only)
    logits: int  # the log-softmax over the vocabulary

    @classmethod
    def of(cls, config: Any, bytes_per_float: int = 4) -> ActivationSizes:
        hidden = int(config.hidden_size)
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        kv = int(getattr(config, "num_key_value_heads", None) or heads) * head_dim
        attention = heads * head_dim
        floats = 4 * hidden + 3 * attention + 2 * kv + 4 * int(config.intermediate_size)
        return cls(
            layers=int(config.num_hidden_layers),
            full_layer=floats * bytes_per_float,
            checkpointed_layer=hidden * bytes_per_float,
            logits=int(config.vocab_size) * bytes_per_float,
        )

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
