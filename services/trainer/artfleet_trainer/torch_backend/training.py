"""One GRPO step with ART's own tokenization, packing and loss, on plain torch + peft.

ART computes the attention mask and the new logprobs in `art/unsloth/train.py`, which
does not import without Unsloth; the few lines are rewritten here:
- packed rows hold several trajectories, so attention is causal AND within the same
  group or its parent group (the shared prompt), as a 4-D additive mask, and position
  ids come from `input_pos` (each trajectory restarts where its prompt ended);
- the new logprob at position t is that of token t+1, computed from hidden states in
  chunks (full fp32 logits would be S x vocab x 4 bytes per row at once).
The mask is built in the model's dtype: on CUDA, SDPA's memory-efficient kernel refuses a
bias whose dtype differs from the query's, and flash takes no mask at all. A row that is
one plain causal sequence (an SFT row) gets no mask, so SDPA may pick flash and its GQA
path (an explicit mask makes transformers repeat k/v for every query head).
How much each row keeps for the backward pass (all activations, or some decoder layers
and the logits chunks recomputed) is decided per row by `activation_memory.plan_row`.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

import torch
from peft import LoraConfig
from torch.utils.checkpoint import checkpoint

from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import (
    activation_memory,
    correction,
    exact_tokens,
    mismatch,
)
from artfleet_trainer.torch_backend.full_model import FullModel
from artfleet_trainer.torch_backend.ranks import RankGroup, Share, shares
from artfleet_trainer.torch_backend.tool_history import without_rendered_tool_calls

log = logging.getLogger(__name__)

LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MAX_GRAD_NORM = 0.1
DEFAULT_PACKED_LENGTH = 2048
DEFAULT_CHUNK_SIZE = 512

PackedTensors = art.preprocessing.pack.PackedTensors


def lora_config(rank: int = 8) -> LoraConfig:
    """ART's defaults: r=8, alpha=2r, all attention and MLP projections, no dropout."""
    return LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=list(LORA_TARGET_MODULES),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )


@contextmanager
def quiet_peft_wrap() -> Iterator[None]:
    """Wrapping a model in peft reads transformers' deprecated `is_gradient_checkpointing`
    (peft 0.21), whose FutureWarning read as if checkpointing were on: it says nothing
    about it (activation_memory.py decides that per row)."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning
        )
        yield


def make_optimizer(parameters: Sequence[torch.nn.Parameter]) -> torch.optim.AdamW:
    """ART's AdamW settings. No rate of its own: every train() and SFT batch sets the
    job's (the job spec's `learning_rate`, or `sft.learning_rate`) before stepping."""
    return torch.optim.AdamW(parameters, lr=0.0, betas=(0.9, 0.99), weight_decay=0.1)


@dataclass
class PackedBatch:
    tensors: PackedTensors
    num_results: int  # tokenized trajectories (histories) in the rows


def tokenize_groups(
    tokenizer: Any, groups: list[art.TrajectoryGroup], dev_config: art.dev.TrainConfig
) -> list[Any]:
    """ART's tokenization (advantages, masks, logprobs), then every turn that carries the
    engine's ids put back in exactly the context it was sampled from (`exact_tokens`)."""
    results = art.preprocessing.tokenize.tokenize_trajectory_groups(
        tokenizer,
        without_rendered_tool_calls(groups),
        allow_training_without_logprobs=dev_config.get("allow_training_without_logprobs", False),
        scale_rewards=dev_config.get("scale_rewards", True),
    )
    return exact_tokens.exact(results, tokenizer)


def pack_trajectory_groups(
    tokenizer: Any,
    groups: list[art.TrajectoryGroup],
    dev_config: art.dev.TrainConfig,
    *,
    max_context: int,
) -> PackedBatch | None:
    """Tokenize and pack; None when nothing is trainable (e.g. equal rewards everywhere)."""
    results = tokenize_groups(tokenizer, groups, dev_config)
    too_long = [r for r in results if len(r.token_ids) > max_context]
    if too_long:
        warnings.warn(
            f"dropping {len(too_long)} trajectories longer than the context ({max_context})",
            stacklevel=2,
        )
        results = [r for r in results if len(r.token_ids) <= max_context]
    if not results:
        return None
    wanted = dev_config.get("packed_sequence_length") or DEFAULT_PACKED_LENGTH
    seq_len = min(max(wanted, max(len(r.token_ids) for r in results)), max_context)
    packed = art.preprocessing.pack.packed_tensors_from_tokenized_results(
        results,
        seq_len,
        pad_token_id=int(tokenizer.pad_token_id),  # the default -100 crashes the embedding
        truncate_long_results=False,
        advantage_balance=dev_config.get("advantage_balance", 0.0),
        verbosity=0,
        pack_results=True,
    )
    allow_missing = dev_config.get("allow_training_without_logprobs", False)
    if not allow_missing and bool(torch.isnan(packed["logprobs"]).all()):
        return None
    return PackedBatch(trim_padding(packed), len(results))


def trim_padding(packed: PackedTensors) -> PackedTensors:
    """Drop the trailing columns that are padding in every row (pads have group id -1)."""
    used = (packed["group_ids"] != -1).any(dim=0).nonzero()
    width = int(used.max()) + 1 if used.numel() else 1
    trimmed = {
        key: value[:, :width] if isinstance(value, torch.Tensor) else value
        for key, value in packed.items()
    }
    return cast(PackedTensors, trimmed)


def attention_bias(
    group_ids: torch.Tensor, parent_ids: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """[B, 1, S, S] additive mask in `dtype` (the model's): 0 where query i may see key j,
    the dtype's lowest value elsewhere (as transformers' own masks: no -inf arithmetic)."""
    seq_len = group_ids.shape[1]
    causal = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool, device=group_ids.device))
    same_group = group_ids.unsqueeze(2) == group_ids.unsqueeze(1)
    parent_group = parent_ids.unsqueeze(2) == group_ids.unsqueeze(1)
    allowed = causal.unsqueeze(0) & (same_group | parent_group)
    bias = torch.zeros(allowed.shape, dtype=dtype, device=group_ids.device)
    bias.masked_fill_(~allowed, torch.finfo(dtype).min)
    return bias.unsqueeze(1)


def model_dtype(model: Any) -> torch.dtype:
    """The dtype the decoder computes in (its embeddings'; a peft adapter may differ)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return cast(torch.dtype, base.get_input_embeddings().weight.dtype)


def shifted_targets(tokens: torch.Tensor) -> torch.Tensor:
    """The token each position predicts (t+1); the last column gets a dummy 0."""
    return torch.nn.functional.pad(tokens[:, 1:], (0, 1), value=0)


def hidden_and_head(
    model: Any, tokens: torch.Tensor, mask: torch.Tensor | None, input_pos: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The decoder's last hidden states and the output head's weight (the logits are
    their product, chunked). A full fine-tune's model gives both from one forward of its
    own (full_model.py: its head may be sharded)."""
    own = getattr(model, "hidden_and_head", None)
    if own is not None:
        return own(tokens, mask, input_pos)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.get_decoder()(
        input_ids=tokens, attention_mask=mask, position_ids=input_pos, use_cache=False
    ).last_hidden_state
    return hidden, base.get_output_embeddings().weight


def compute_logprobs(
    model: Any,
    tokens: torch.Tensor,
    input_pos: torch.Tensor,
    group_ids: torch.Tensor | None,
    parent_ids: torch.Tensor | None,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    checkpoint_chunks: bool = True,
    targets: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """New logprobs and entropies [B, S] in fp32; position t scores token t+1 (ART's
    convention), or `targets[:, t]` when given (datums packed side by side name their own).
    `group_ids`/`parent_ids` None: one plain causal sequence per row, no mask.

    With `checkpoint_chunks` (and gradients on) each chunk's logits are recomputed in the
    backward pass instead of kept: S x vocab x 4 bytes less, one more lm-head product."""
    mask = None
    if group_ids is not None and parent_ids is not None:
        mask = attention_bias(group_ids, parent_ids, dtype=model_dtype(model))
    hidden, weight = hidden_and_head(model, tokens, mask, input_pos)
    if targets is None:
        targets = shifted_targets(tokens)
    logprobs, entropies = [], []
    for start in range(0, tokens.shape[1], chunk_size):
        args = (
            hidden[:, start : start + chunk_size],
            weight,
            targets[:, start : start + chunk_size],
        )
        if checkpoint_chunks and torch.is_grad_enabled():
            chunk_lp, chunk_ent = checkpoint(_chunk_logprobs, *args, use_reentrant=False)
        else:
            chunk_lp, chunk_ent = _chunk_logprobs(*args)
        logprobs.append(chunk_lp)
        entropies.append(chunk_ent)
    return torch.cat(logprobs, dim=1), torch.cat(entropies, dim=1)


def _chunk_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    # One log_softmax, reused for the entropy: logits.gather - logsumexp(logits) (and its
    # backward) took 2.6 CPU-s against 1.4 for an 866-token row of SmolLM2 (1 thread).
    # The product in the model's dtype (as vLLM samples), the log-softmax in fp32.
    logits = torch.nn.functional.linear(hidden, weight).float()
    logprobs = torch.log_softmax(logits, dim=-1)
    del logits  # log_softmax's backward needs its output only
    selected = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():  # entropy is reported, not trained on
        entropy = -(logprobs.exp() * logprobs).sum(dim=-1)
    return selected, entropy


@dataclass
class StepStats:
    losses: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    probs_corrs: list[float] = field(default_factory=list)
    kls: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    checkpointed_layers: list[int] = field(default_factory=list)  # per row
    # Per row, trainer - sampler logprob of its counted tokens (mismatch.py).
    log_ratios: list[torch.Tensor] = field(default_factory=list)
    masked_sequences: int | None = None  # by the sequence_mask correction; None: not on

    @classmethod
    def merged(cls, parts: Sequence[StepStats]) -> StepStats:
        """The stats of one step run on several ranks (in rank order): each rank's rows'
        figures; the gradient norms are every rank's (the same step), taken from rank 0."""
        masked = [p.masked_sequences for p in parts if p.masked_sequences is not None]
        return cls(
            losses=[v for p in parts for v in p.losses],
            entropies=[v for p in parts for v in p.entropies],
            probs_corrs=[v for p in parts for v in p.probs_corrs],
            kls=[v for p in parts for v in p.kls],
            grad_norms=list(parts[0].grad_norms),
            checkpointed_layers=[v for p in parts for v in p.checkpointed_layers],
            log_ratios=[v for p in parts for v in p.log_ratios],
            masked_sequences=sum(masked) if masked else None,
        )

    @classmethod
    def for_step(cls, dev_config: art.dev.TrainConfig) -> StepStats:
        """A step's stats: with the sequence_mask correction on, its count starts at 0 (a
        step with nothing to train reports it too)."""
        return cls(masked_sequences=0 if correction.band_of(dev_config) is not None else None)

    def summary(self) -> dict[str, float]:
        out = {
            "loss": _mean(self.losses),
            "grad_norm": _mean(self.grad_norms),
            "entropy": _mean(self.entropies),
            "probs_corr": _mean(self.probs_corrs),
            "num_gradient_steps": float(len(self.grad_norms)),
            "checkpointed_layers": _mean([float(n) for n in self.checkpointed_layers]),
        }
        if self.kls:
            out["kl_policy_ref"] = _mean(self.kls)
        figures = mismatch.figures(self.log_ratios)
        if figures is not None:
            out.update(figures.metrics())
        if self.masked_sequences is not None:
            out["masked_sequences"] = float(self.masked_sequences)
        return out


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")


@dataclass(frozen=True)
class StepMemory:
    """What bounds each row's activations in one step: the model's per-token sizes and the
    budget a row may keep (activation_memory.py), measured once per step."""

    sizes: activation_memory.ActivationSizes
    budget: int

    @classmethod
    def measure(
        cls,
        model: Any,
        dev_config: art.dev.TrainConfig,
        activation_budget_bytes: int | None = None,
        memory_fraction: float = 0.0,
    ) -> StepMemory:
        chunk = int(dev_config.get("logprob_calculation_chunk_size", DEFAULT_CHUNK_SIZE))
        sizes, budget = activation_memory.sizes_and_budget(
            model, activation_budget_bytes, chunk, memory_fraction
        )
        return cls(sizes, budget)


@dataclass(frozen=True)
class Row:
    """One forward pass of a training step: its token count (for the memory plan) and its
    loss, computed by `loss(model, checkpoint_logits)` (a scalar to differentiate)."""

    num_tokens: int
    loss: Callable[[Any, bool], torch.Tensor]


def forward_backward(
    model: Any, rows: Iterable[Row], memory: StepMemory, stats: StepStats, *, scale: float = 1.0
) -> None:
    """The training primitive: adds the gradient of each row's loss (times `scale`) to the
    trainable parameters' `.grad`, one row at a time within the step's memory plan.
    Gradients accumulate until `optim_step`. GRPO rows (`GrpoRows`) and the Tinker-compatible
    API's datums (`datum_training`) both come through here."""
    model.train()
    try:
        for row in rows:
            plan = activation_memory.plan_and_apply(
                model, row.num_tokens, memory.sizes, memory.budget
            )
            stats.checkpointed_layers.append(plan.checkpointed_layers)
            (row.loss(model, plan.checkpoint_logits) * scale).backward()
    finally:
        model.eval()


class GrpoRows:
    """The packed rows of a GRPO step as `Row`s: ART's policy loss on exactly the sampled
    tokens."""

    def __init__(
        self,
        model: Any,
        packed: PackedTensors,
        config: art.types.TrainConfig,
        dev_config: art.dev.TrainConfig,
        stats: StepStats,
    ) -> None:
        self._device = next(p for p in model.parameters() if p.requires_grad).device
        self._packed, self._config, self._dev_config, self._stats = (
            packed,
            config,
            dev_config,
            stats,
        )
        self._power = float(dev_config.get("num_trajectories_learning_rate_multiplier_power", 0.0))

    def rows(self, shares: Sequence[Share]) -> Iterator[Row]:
        for share in shares:
            inputs = self._inputs(share.index)
            yield Row(int(inputs["tokens"].numel()), partial(self._loss, inputs, share.counts))

    def multiplier_of(self, index: int) -> float:
        """The learning-rate multiplier of row `index` (a step's last row sets it)."""
        return _rate_multiplier(self._inputs(index), self._power)

    def _inputs(self, index: int) -> Any:
        inputs = art.preprocessing.inputs.create_train_inputs(
            self._packed, index, self._config, self._dev_config, warmup=False
        )
        # Rows are computed one at a time: each drops its own trailing padding (the last
        # row of a batch is often short).
        return _to_device(trim_padding(inputs), self._device)

    def _loss(self, inputs: Any, counts: bool, model: Any, checkpoint_logits: bool) -> torch.Tensor:
        # a row run only to keep the ranks in step (ranks.py) records nothing, weighs 0
        stats = self._stats if counts else StepStats.for_step(self._dev_config)
        loss = _row_loss(model, inputs, self._config, self._dev_config, checkpoint_logits, stats)
        if not counts:
            return loss.policy_loss * 0.0
        _record_loss(stats, loss)
        return loss.policy_loss


def optim_step(
    optimizer: torch.optim.Optimizer,
    learning_rate: float,
    stats: StepStats,
    *,
    max_grad_norm: float = MAX_GRAD_NORM,
    ranks: RankGroup | None = None,
) -> None:
    """The other primitive: clips the accumulated gradients (not when `max_grad_norm` is
    0), takes one optimizer step at `learning_rate`, and clears the gradients. With
    `ranks`, the gradients are first summed over them (each added its rows' share)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if ranks is not None:
        ranks.reduce_gradients(params)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else math.inf)
    full = getattr(norm, "full_tensor", None)  # sharded parameters' norm: a DTensor
    stats.grad_norms.append(float(full() if full is not None else norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def train_on_packed(
    model: Any,
    optimizer: torch.optim.Optimizer,
    packed: PackedTensors,
    config: art.types.TrainConfig,
    dev_config: art.dev.TrainConfig,
    *,
    max_grad_norm: float = MAX_GRAD_NORM,
    activation_budget_bytes: int | None = None,
    memory_fraction: float = 0.0,
    ranks: RankGroup | None = None,
) -> StepStats:
    """A GRPO step, composed of the primitives: per `grad_accumulation_sequences` rows, one
    `forward_backward` (each row's loss averaged over the rows) and one `optim_step`.
    With `ranks`, each rank runs its share of each optimizer step's rows (ranks.py) and
    every rank returns the stats of all.

    Each row keeps at most `activation_budget_bytes` of activations for the backward
    pass (estimated; 0: recompute every layer and the logits; None: the device's budget,
    measured at the start of the step within `memory_fraction` of a GPU when set)."""
    stats = StepStats.for_step(dev_config)
    memory = StepMemory.measure(model, dev_config, activation_budget_bytes, memory_fraction)
    optimizer.zero_grad(set_to_none=True)
    try:
        grpo = GrpoRows(model, packed, config, dev_config, stats)
        for rows in _row_batches(packed, config.grad_accumulation_sequences or 1):
            shares = _shares(rows, ranks)
            forward_backward(model, grpo.rows(shares), memory, stats, scale=1 / len(rows))
            optim_step(
                optimizer,
                config.learning_rate * grpo.multiplier_of(rows[-1]),
                stats,
                max_grad_norm=max_grad_norm,
                ranks=ranks,
            )
    finally:
        optimizer.zero_grad(set_to_none=True)
    return stats if ranks is None else StepStats.merged(ranks.gather(stats))


def _shares(rows: Sequence[int], ranks: RankGroup | None) -> list[Share]:
    """The rows of `rows` this rank runs (ranks.shares, mapped to their row numbers)."""
    return [Share(rows[s.index], s.counts) for s in shares(len(rows), ranks)]


def _rate_multiplier(inputs: Any, power: float) -> float:
    """ART's `num_trajectories_learning_rate_multiplier_power`: the rate times (the row's
    trajectories) ** power, as ART's Unsloth loss sets it per row (a step's last row wins)."""
    if not power:
        return 1.0
    trajectories = int(
        torch.unique(inputs["group_ids"]).numel() - torch.unique(inputs["parent_ids"]).numel()
    )
    return float(max(trajectories, 1)) ** power


def _to_device(inputs: Any, device: torch.device) -> Any:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _row_batches(packed: PackedTensors, per_step: int) -> Iterator[list[int]]:
    rows = list(range(packed["tokens"].shape[0]))
    for start in range(0, len(rows), per_step):
        yield rows[start : start + per_step]


def _row_loss(
    model: Any,
    inputs: Any,
    config: art.types.TrainConfig,
    dev_config: art.dev.TrainConfig,
    checkpoint_chunks: bool,
    stats: StepStats,
) -> art.loss.Loss:
    chunk = dev_config.get("logprob_calculation_chunk_size", DEFAULT_CHUNK_SIZE)
    args = (inputs["tokens"], inputs["input_pos"], inputs["group_ids"], inputs["parent_ids"])
    new_logprobs, entropies = compute_logprobs(
        model, *args, chunk_size=chunk, checkpoint_chunks=checkpoint_chunks
    )
    # Read off the loss's own forward (no extra pass), only before the step's first
    # optimizer step: later rows are scored by weights this step already moved, and that
    # drift is learning, not a sampler that disagrees with the trainer.
    if not stats.grad_norms:
        stats.log_ratios.append(mismatch.token_log_ratios(new_logprobs, inputs))
    band = correction.band_of(dev_config)
    if band is not None:  # the sequence_mask correction (ART's loss has none)
        inputs, masked = correction.mask_sequences(inputs, new_logprobs, band)
        stats.masked_sequences = (stats.masked_sequences or 0) + masked
    ref_logprobs = None
    if config.kl_penalty_coef > 0:
        if isinstance(model, FullModel):
            raise ValueError(
                "kl_penalty_coef needs the base model as the reference policy, and a full "
                "fine-tune keeps no copy of it: set kl_penalty_coef to 0, or finetune: lora"
            )
        # The reference policy is the base model: the same forward with LoRA disabled.
        adapter_off = (
            model.disable_adapter() if hasattr(model, "disable_adapter") else nullcontext()
        )
        with torch.no_grad(), adapter_off:
            ref_logprobs, _ = compute_logprobs(model, *args, chunk_size=chunk)
    return art.loss.loss_fn(inputs, new_logprobs, ref_logprobs, entropies, dev_config)


def _record_loss(stats: StepStats, loss: art.loss.Loss) -> None:
    stats.losses.append(float(loss.policy_loss.detach()))
    stats.probs_corrs.append(float(loss.probs_corr.detach()))
    if loss.entropy is not None:
        stats.entropies.append(float(loss.entropy.detach()))
    if loss.kl_policy_ref is not None:
        stats.kls.append(float(loss.kl_policy_ref.detach()))
