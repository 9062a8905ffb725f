"""The Tinker-compatible API's `forward_backward` on the torch backend: datums
packed into rows and trained through the same `training.forward_backward` as a GRPO step.

A datum is a token sequence whose position i predicts `target_tokens[i]`, with per-position
loss inputs. Losses are sums over positions and datums (Tinker's convention: callers weight
their tokens themselves), and each datum's logprobs of its targets come back in input
order. Datums are packed side by side into rows of up to `pack_tokens` (attention stays
within each datum, positions restart), so many short datums cost few forward passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from artfleet.contracts.errors import InvalidArgument

from .training import (
    DEFAULT_PACKED_LENGTH,
    Row,
    StepMemory,
    StepStats,
    compute_logprobs,
    forward_backward,
)

Loss = Callable[[torch.Tensor, Mapping[str, torch.Tensor], Mapping[str, float]], torch.Tensor]


@dataclass(frozen=True)
class Datum:
    tokens: list[int]
    targets: list[int]
    inputs: dict[str, list[float]]


def _cross_entropy(
    logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], _: Mapping[str, float]
) -> torch.Tensor:
    weights = inputs.get("weights")
    return -(logprobs * weights).sum() if weights is not None else -logprobs.sum()


def _ratio(logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    return torch.exp(logprobs - inputs["logprobs"])


def _importance_sampling(
    logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], _: Mapping[str, float]
) -> torch.Tensor:
    return -(_ratio(logprobs, inputs) * inputs["advantages"]).sum()


def _clip(config: Mapping[str, float]) -> tuple[float, float]:
    return config.get("clip_low_threshold", 0.8), config.get("clip_high_threshold", 1.2)


def _ppo(
    logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> torch.Tensor:
    ratio, advantages = _ratio(logprobs, inputs), inputs["advantages"]
    clipped = torch.clamp(ratio, *_clip(config))
    return -torch.minimum(ratio * advantages, clipped * advantages).sum()


def _cispo(
    logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float]
) -> torch.Tensor:
    weight = torch.clamp(_ratio(logprobs, inputs), *_clip(config)).detach()
    return -(weight * logprobs * inputs["advantages"]).sum()


@dataclass(frozen=True)
class LossSpec:
    fn: Loss
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()
    config: tuple[str, ...] = ()


_POLICY = ("logprobs", "advantages")
_CLIP = ("clip_low_threshold", "clip_high_threshold")
LOSSES: dict[str, LossSpec] = {
    "cross_entropy": LossSpec(_cross_entropy, (), ("weights",)),
    "importance_sampling": LossSpec(_importance_sampling, _POLICY),
    "ppo": LossSpec(_ppo, _POLICY, config=_CLIP),
    "cispo": LossSpec(_cispo, _POLICY, config=_CLIP),
}


def check(
    datums: Sequence[Datum], loss_fn: str, config: Mapping[str, float], max_context: int
) -> LossSpec:
    """The loss named, once every datum and config value is usable; else InvalidArgument
    naming what is not (the datum's index, the input, the key)."""
    spec = LOSSES.get(loss_fn)
    if spec is None:
        raise InvalidArgument(
            f"loss {loss_fn!r} is not implemented here (served: {', '.join(LOSSES)})", "loss_fn"
        )
    for key, value in config.items():
        if key not in spec.config:
            raise InvalidArgument(f"{loss_fn} takes no {key!r}", "loss_fn_config")
        if not math.isfinite(value):
            raise InvalidArgument(f"{key} is not a finite number", "loss_fn_config")
    if not datums:
        raise InvalidArgument("no datum", "data")
    for index, datum in enumerate(datums):
        _check_datum(index, datum, spec, loss_fn, max_context)
    return spec


def _check_datum(index: int, datum: Datum, spec: LossSpec, loss_fn: str, limit: int) -> None:
    where = f"data[{index}]"
    length = len(datum.tokens)
    if length == 0:
        raise InvalidArgument("the model input is empty", where)
    if length > limit:
        raise InvalidArgument(f"{length} tokens; the model's context is {limit}", where)
    if len(datum.targets) != length:
        raise InvalidArgument(
            f"target_tokens has {len(datum.targets)} positions, the input {length}", where
        )
    for key in spec.required:
        if key not in datum.inputs:
            raise InvalidArgument(f"{loss_fn} needs loss_fn_inputs[{key!r}]", where)
    for key, values in datum.inputs.items():
        if key not in spec.required + spec.optional:
            raise InvalidArgument(f"{loss_fn} takes no loss_fn_inputs[{key!r}]", where)
        if len(values) != length:
            raise InvalidArgument(f"{key} has {len(values)} positions, the input {length}", where)
        if not all(math.isfinite(v) for v in values):
            raise InvalidArgument(f"{key} holds NaN or infinite values", where)


@dataclass
class DatumOutputs:
    """What a forward(_backward) returns: each datum's target logprobs and the loss sum."""

    logprobs: list[list[float]] = field(default_factory=list)
    loss_sum: float = 0.0

    def metrics(self) -> dict[str, float]:
        return {"loss:sum": self.loss_sum}


def pack(datums: Sequence[Datum], pack_tokens: int = DEFAULT_PACKED_LENGTH) -> list[list[int]]:
    """Datum indices per row, in order: a row takes datums while their tokens fit."""
    rows: list[list[int]] = []
    used = pack_tokens
    for index, datum in enumerate(datums):
        if used + len(datum.tokens) > pack_tokens or not rows:
            rows.append([])
            used = 0
        rows[-1].append(index)
        used += len(datum.tokens)
    return rows


class DatumRows:
    """Packed datums as `training.Row`s; each row's loss records its datums' outputs."""

    def __init__(
        self,
        datums: Sequence[Datum],
        spec: LossSpec,
        config: Mapping[str, float],
        device: torch.device,
        pack_tokens: int = DEFAULT_PACKED_LENGTH,
    ) -> None:
        self._datums, self._spec, self._config, self._device = datums, spec, config, device
        self._packs = pack(datums, pack_tokens)
        self._logprobs: dict[int, list[float]] = {}
        self._loss_sum = 0.0

    def rows(self) -> Iterator[Row]:
        for indices in self._packs:
            yield Row(
                sum(len(self._datums[i].tokens) for i in indices), partial(self._loss, indices)
            )

    def outputs(self) -> DatumOutputs:
        ordered = [self._logprobs[i] for i in range(len(self._datums))]
        return DatumOutputs(ordered, self._loss_sum)

    def _loss(self, indices: list[int], model: Any, checkpoint_logits: bool) -> torch.Tensor:
        datums = [self._datums[i] for i in indices]
        tokens = torch.tensor([[t for d in datums for t in d.tokens]], device=self._device)
        targets = torch.tensor([[t for d in datums for t in d.targets]], device=self._device)
        positions = torch.tensor(
            [[p for d in datums for p in range(len(d.tokens))]], device=self._device
        )
        groups = None
        if len(datums) > 1:  # attention within each datum; one datum needs no mask
            groups = torch.tensor(
                [[g for g, d in enumerate(datums) for _ in d.tokens]], device=self._device
            )
        logprobs, _ = compute_logprobs(
            model,
            tokens,
            positions,
            groups,
            groups,
            checkpoint_chunks=checkpoint_logits,
            targets=targets,
        )
        total = torch.zeros((), device=self._device)
        start = 0
        for index, datum in zip(indices, datums, strict=True):
            own = logprobs[0, start : start + len(datum.tokens)]
            start += len(datum.tokens)
            inputs = {
                k: torch.tensor(v, dtype=torch.float32, device=self._device)
                for k, v in datum.inputs.items()
            }
            total = total + self._spec.fn(own, inputs, self._config)
            self._logprobs[index] = own.detach().float().cpu().tolist()
        self._loss_sum += float(total.detach())
        return total


def run(
    model: Any,
    datums: Sequence[Datum],
    spec: LossSpec,
    config: Mapping[str, float],
    memory: StepMemory | None,
    *,
    forward_only: bool = False,
) -> tuple[DatumOutputs, StepStats]:
    """Forward (and backward, adding to the gradients) over `datums`, packed."""
    device = next(p for p in model.parameters() if p.requires_grad).device
    batch = DatumRows(datums, spec, config, device)
    stats = StepStats()
    if forward_only or memory is None:
        with torch.no_grad():
            for row in batch.rows():
                row.loss(model, False)
    else:
        forward_backward(model, batch.rows(), memory, stats)
    return batch.outputs(), stats
