"""The Tinker-compatible API's `forward_backward` on the torch backend: datums
packed into rows and trained through the same `training.forward_backward` as a GRPO step.

A datum is a token sequence whose position i predicts `target_tokens[i]`, with per-position
loss inputs. Losses are sums over positions and datums (Tinker's convention: callers weight
their tokens themselves), and each datum's logprobs of its targets come back in input
order. Datums are packed side by side into rows of up to `pack_tokens` (attention stays
within each datum, positions restart), so many short datums cost few forward passes, and
consecutive datums that begin alike (an RL group's samples of one prompt) share the
forward pass of their common beginning, as ART packs a prompt once for its completions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from artfleet.contracts.errors import InvalidArgument

from .ranks import RankGroup, shares
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
    datums: Sequence[Datum],
    loss_fn: str,
    config: Mapping[str, float],
    max_context: int,
    vocab_size: int | None = None,
) -> LossSpec:
    """The loss named, once every datum and config value is usable; else InvalidArgument
    naming what is not (the datum's index, the input, the key). With `vocab_size`, every
    token id of the input and the targets must be one of the model's."""
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
        if vocab_size is not None:
            _check_token_ids(index, datum, vocab_size)
    return spec


def _check_token_ids(index: int, datum: Datum, vocab_size: int) -> None:
    """An id outside the embedding would fail deep in the forward pass (an index error):
    refused here, naming the field."""
    for name, ids in (
        ("model_input", datum.tokens),
        ("loss_fn_inputs.target_tokens", datum.targets),
    ):
        bad = next((t for t in ids if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise InvalidArgument(
                f"token id {bad} is outside the model's vocabulary (0..{vocab_size - 1})",
                f"data[{index}].{name}",
            )


def _check_datum(index: int, datum: Datum, spec: LossSpec, loss_fn: str, limit: int) -> None:
    where = f"data[{index}]"
    length = len(datum.tokens)
    if length == 0:
        raise InvalidArgument("the model input is empty", where)
    if length > limit:
        raise InvalidArgument(
            f"{length} tokens; the context is {limit} (get_server_capabilities' "
            "max_context_length: what the serving engine can sample)",
            where,
        )
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


MIN_SHARED = 8  # a shorter common prefix is not worth a mask entry of its own


@dataclass
class Unit:
    """Datums that begin alike (inputs and targets): their first `shared` positions are
    computed once, each datum's rest attends to them (a group and its parent, as ART
    packs a prompt and its completions). A datum alone has `shared` 0."""

    members: list[int]
    shared: int = 0

    def size(self, datums: Sequence[Datum]) -> int:
        return self.shared + sum(len(datums[i].tokens) - self.shared for i in self.members)


def _common(a: Datum, b: Datum) -> int:
    """Leading positions where both datums have the same input and target."""
    limit = min(len(a.tokens), len(b.tokens)) - 1  # each keeps one position of its own
    n = 0
    while n < limit and a.tokens[n] == b.tokens[n] and a.targets[n] == b.targets[n]:
        n += 1
    return n


def units(datums: Sequence[Datum]) -> list[Unit]:
    """Consecutive datums sharing at least MIN_SHARED leading positions, in order."""
    out: list[Unit] = []
    for index, datum in enumerate(datums):
        if out:
            unit = out[-1]
            common = _common(datums[unit.members[0]], datum)
            shared = min(common, unit.shared) if len(unit.members) > 1 else common
            if shared >= MIN_SHARED:
                unit.members.append(index)
                unit.shared = shared
                continue
        out.append(Unit([index]))
    return out


def pack(datums: Sequence[Datum], pack_tokens: int = DEFAULT_PACKED_LENGTH) -> list[list[Unit]]:
    """Units per row, in order: a row takes units while their tokens fit."""
    rows: list[list[Unit]] = []
    used = pack_tokens
    for unit in units(datums):
        size = unit.size(datums)
        if used + size > pack_tokens or not rows:
            rows.append([])
            used = 0
        rows[-1].append(unit)
        used += size
    return rows


@dataclass
class _Layout:
    """One row's tokens, targets, positions, groups and parents, and where each datum's
    positions are in it (its shared part, then its own)."""

    tokens: list[int] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    spans: dict[int, tuple[slice, slice]] = field(default_factory=dict)

    def add(self, tokens: list[int], targets: list[int], start: int, parent: int) -> slice:
        group = len(set(self.groups))
        at = len(self.tokens)
        self.tokens += tokens
        self.targets += targets
        self.positions += range(start, start + len(tokens))
        self.groups += [group] * len(tokens)
        self.parents += [group if parent < 0 else parent] * len(tokens)
        return slice(at, len(self.tokens))

    @classmethod
    def of(cls, row: list[Unit], datums: Sequence[Datum]) -> _Layout:
        layout = cls()
        for unit in row:
            first = datums[unit.members[0]]
            shared = layout.add(first.tokens[: unit.shared], first.targets[: unit.shared], 0, -1)
            parent = layout.groups[-1] if unit.shared else -1
            for index in unit.members:
                d = datums[index]
                own = layout.add(
                    d.tokens[unit.shared :], d.targets[unit.shared :], unit.shared, parent
                )
                layout.spans[index] = (shared, own)
        return layout


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

    def rows(self, ranks: RankGroup | None = None) -> Iterator[Row]:
        """Every packed row, or this rank's share of them (ranks.py)."""
        count = len(self._packs)
        for share in shares(count, ranks):
            units_in_row = self._packs[share.index]
            size = sum(unit.size(self._datums) for unit in units_in_row)
            yield Row(size, partial(self._loss, units_in_row, share.counts))

    def outputs(self, ranks: RankGroup | None = None) -> DatumOutputs:
        """Every datum's outputs (with `ranks`: gathered from all of them, on each)."""
        logprobs, loss_sum = self._logprobs, self._loss_sum
        if ranks is not None:
            parts = ranks.gather((logprobs, loss_sum))
            logprobs = {i: lp for part, _ in parts for i, lp in part.items()}
            loss_sum = sum(total for _, total in parts)
        ordered = [logprobs[i] for i in range(len(self._datums))]
        return DatumOutputs(ordered, loss_sum)

    def _loss(
        self, row: list[Unit], counts: bool, model: Any, checkpoint_logits: bool
    ) -> torch.Tensor:
        layout = _Layout.of(row, self._datums)

        def tensor(values: list[int]) -> torch.Tensor:
            return torch.tensor([values], device=self._device)

        plain = len(row) == 1 and len(row[0].members) == 1  # one sequence: no mask
        logprobs, _ = compute_logprobs(
            model,
            tensor(layout.tokens),
            tensor(layout.positions),
            None if plain else tensor(layout.groups),
            None if plain else tensor(layout.parents),
            checkpoint_chunks=checkpoint_logits,
            targets=tensor(layout.targets),
        )
        total = torch.zeros((), device=self._device)
        for index, (shared, own) in layout.spans.items():
            datum = self._datums[index]
            lp = torch.cat([logprobs[0, shared], logprobs[0, own]])
            inputs = {
                k: torch.tensor(v, dtype=torch.float32, device=self._device)
                for k, v in datum.inputs.items()
            }
            total = total + self._spec.fn(lp, inputs, self._config)
            if counts:
                self._logprobs[index] = lp.detach().float().cpu().tolist()
        if not counts:  # run only to keep the ranks in step
            return total * 0.0
        self._loss_sum += float(total.detach())
        return total


def run(
    model: Any,
    datums: Sequence[Datum],
    spec: LossSpec,
    config: Mapping[str, float],
    memory: StepMemory | None,
    ranks: RankGroup | None = None,
) -> DatumOutputs:
    """Forward over `datums`, packed, and backward (adding to the gradients) within the
    step's `memory` plan; without one, forward only. With `ranks`, each runs its share of
    the packed rows; the gradients are summed at the optimizer step (training.optim_step)."""
    device = next(p for p in model.parameters() if p.requires_grad).device
    batch = DatumRows(datums, spec, config, device)
    if memory is None:
        with torch.no_grad():
            for row in batch.rows(ranks):
                row.loss(model, False)
    else:
        forward_backward(model, batch.rows(ranks), memory, StepStats())
    return batch.outputs(ranks)
