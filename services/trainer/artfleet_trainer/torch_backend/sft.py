"""Supervised fine-tuning on the torch backend: masked cross-entropy on assistant tokens.

ART's own SFT tokenizer (`tokenize_sft_batch`) needs Unsloth; this renders the same chat
template, segment by segment: for each assistant turn i, the text up to the generation
prompt before it (`messages[:i]`, add_generation_prompt) and the text through it
(`messages[:i+1]`) must be prefixes of the whole conversation, and the characters between
them are the turn's trainable tokens (its content and end-of-turn, as ART's
`train_on_responses_only` marks them). Segments are tokenized separately, so the model
trains on the tokens it would see at generation time (prompt, then its own answer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from artfleet_trainer.backends.art_compat import art

from .ranks import RankGroup, shares
from .training import Row, StepMemory, StepStats, compute_logprobs, forward_backward, optim_step

SFT_MAX_GRAD_NORM = 1.0  # ART's Unsloth SFT clips at 1.0 (GRPO at 0.1)


@dataclass(frozen=True)
class SftRow:
    token_ids: list[int]
    trainable: list[bool]  # per token: an assistant token (its label is trained)

    @property
    def num_trainable(self) -> int:
        return sum(self.trainable)


class NotTrainable(ValueError):
    """A trajectory that cannot be an SFT row; the message says why."""


def _render(tokenizer: Any, messages: list[Any], tools: Any, generation: bool) -> str:
    text = tokenizer.apply_chat_template(
        messages, tools=tools or None, tokenize=False, add_generation_prompt=generation
    )
    return str(text)


def _as_messages(trajectory: art.Trajectory) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in trajectory.messages_and_choices:
        if isinstance(item, dict):
            out.append(dict(item))
        else:  # a sampled Choice: its message is the assistant turn
            out.append(item.message.model_dump(exclude_none=True))
    return out


def tokenize_sft(tokenizer: Any, trajectory: art.Trajectory, max_length: int) -> SftRow:
    """One conversation as tokens with its assistant tokens marked; NotTrainable when the
    template does not render turns as prefixes, it has no assistant token, or it is longer
    than `max_length`."""
    messages = _as_messages(trajectory)
    tools = trajectory.tools
    full = _render(tokenizer, messages, tools, generation=False)
    cuts: list[tuple[int, bool]] = []  # (end offset, trainable) of each segment
    done = 0
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        prompt = _render(tokenizer, messages[:i], tools, generation=True)
        through = _render(tokenizer, messages[: i + 1], tools, generation=False)
        if not (full.startswith(through) and through.startswith(prompt)) or len(prompt) < done:
            raise NotTrainable("chat template does not render turns as prefixes")
        cuts += [(len(prompt), False), (len(through), True)]
        done = len(through)
    cuts.append((len(full), False))
    ids: list[int] = []
    mask: list[bool] = []
    start = 0
    for end, trainable in cuts:
        if end > start:
            piece = tokenizer(full[start:end], add_special_tokens=False)["input_ids"]
            ids += piece
            mask += [trainable] * len(piece)
        start = max(start, end)
    if not any(mask):
        raise NotTrainable("no assistant token")
    if len(ids) > max_length:
        raise NotTrainable("longer than max_length")
    return SftRow(ids, mask)


def row_loss_sum(
    model: Any, row: SftRow, device: torch.device, checkpoint_logits: bool = True
) -> tuple[torch.Tensor, int]:
    """Sum of the negative log-likelihoods of the row's assistant tokens, and their count.
    Position t predicts token t+1, so token j's label is scored at position j-1."""
    tokens = torch.tensor([row.token_ids], device=device)
    positions = torch.arange(len(row.token_ids), device=device).unsqueeze(0)
    # One sequence: plain causal attention, no mask (SDPA's flash and GQA paths).
    logprobs, _ = compute_logprobs(
        model, tokens, positions, None, None, checkpoint_chunks=checkpoint_logits
    )
    labels = torch.tensor(row.trainable[1:], device=device)
    return -(logprobs[0, :-1][labels]).sum(), int(labels.sum())


def train_batch(
    model: Any,
    optimizer: torch.optim.Optimizer,
    rows: list[SftRow],
    learning_rate: float,
    *,
    activation_budget_bytes: int | None = None,
    memory_fraction: float = 0.0,
    ranks: RankGroup | None = None,
) -> dict[str, float]:
    """One optimizer step on `rows`: mean cross-entropy per assistant token of the batch
    (rows one at a time, gradients accumulated: no padding, one row's activations at once).
    Each row is planned like a GRPO row (activation_memory.py): within the budget, or the
    device's (None) measured once per batch. With `ranks`, each runs its share of the rows
    (ranks.py) and every rank returns the batch's figures."""
    device = next(p for p in model.parameters() if p.requires_grad).device
    total = max(sum(sum(r.trainable[1:]) for r in rows), 1)  # labels scored (see above)
    memory = StepMemory.measure(model, {}, activation_budget_bytes, memory_fraction)
    stats = StepStats()
    sums: list[float] = []

    def loss(row: SftRow, counts: bool, model: Any, checkpoint_logits: bool) -> torch.Tensor:
        nll, _ = row_loss_sum(model, row, device, checkpoint_logits)
        if not counts:  # run only to keep the ranks in step
            return nll * 0.0
        sums.append(float(nll.detach()))
        return nll

    try:
        optimizer.zero_grad(set_to_none=True)
        batch = (
            Row(len(rows[s.index].token_ids), partial(loss, rows[s.index], s.counts))
            for s in shares(len(rows), ranks)
        )
        forward_backward(model, batch, memory, stats, scale=1 / total)
        optim_step(optimizer, learning_rate, stats, max_grad_norm=SFT_MAX_GRAD_NORM, ranks=ranks)
    finally:
        optimizer.zero_grad(set_to_none=True)
    loss_sum = sum(sums) if ranks is None else sum(ranks.gather(sum(sums)))
    norm = stats.grad_norms[-1]
    return {
        "loss/train": loss_sum / total,
        "loss/learning_rate": learning_rate,
        "loss/grad_norm": norm if math.isfinite(norm) else float("nan"),
        "data/batch_trainable_tokens": float(total),
    }


@torch.no_grad()
def mean_loss(model: Any, rows: list[SftRow], ranks: RankGroup | None = None) -> float:
    """Mean cross-entropy per assistant token over `rows` (no update): tests and reports."""
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for share in shares(len(rows), ranks):
        nll, n = row_loss_sum(model, rows[share.index], device)
        if share.counts:
            total += float(nll)
            count += n
    if ranks is not None:
        total, count = (sum(v) for v in zip(*ranks.gather((total, count)), strict=True))
    return total / max(count, 1)
