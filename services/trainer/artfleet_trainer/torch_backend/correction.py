"""The `sequence_mask` off-policy correction (artfleet.specs.correction) over ART's packed
tensors: a sequence whose geometric-mean ratio exp(mean over its trained tokens of
trainer_lp - sampler_lp) leaves the band gets weight 0, before ART's loss sees the row.

Sequences are ART's: each trajectory's completion has a group id of its own in the packed
row (its shared prompt another, with no trained token), as `importance_sampling_level:
sequence` in `art.loss.loss_fn` groups them. Positions follow ART's loss: position t scores
token t+1, so the row's tensors are shifted by one (`art.loss.shift_tensor`) to line up with
the new logprobs. Tokens without a sampler logprob (NaN) are left out of the mean, as ART
takes their ratio for 1; a sequence with none is kept. Zeroed weights leave the row's
token-mean denominator as it was (ART's own `weights` do the same).

`tis` needs nothing here: it is ART's `truncated_importance_sampling` (dev config).
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch

from artfleet.specs.correction import BAND_EDGE_TOLERANCE
from artfleet_trainer.backends.art_compat import art

# The dev config's key for the band: ours, beside ART's own (ART reads its keys with .get).
BAND_KEY = "artfleet_sequence_mask_band"


def set_band(dev_config: art.dev.TrainConfig, band: tuple[float, float]) -> None:
    low, high = (float(v) for v in band)
    if not 0 < low <= 1.0 <= high:
        raise ValueError(f"sequence_mask_band must contain 1.0, not {band!r}")
    cast(dict[str, Any], dev_config)[BAND_KEY] = (low, high)


def band_of(dev_config: art.dev.TrainConfig) -> tuple[float, float] | None:
    band = cast(dict[str, Any], dev_config).get(BAND_KEY)
    return None if band is None else (float(band[0]), float(band[1]))


def sequence_log_ratios(inputs: Any, new_logprobs: torch.Tensor) -> list[dict[int, float]]:
    """Per row, {group id: mean over the sequence's trained tokens of trainer_lp -
    sampler_lp} (the log of its geometric-mean ratio), for sequences with a sampler
    logprob."""
    shift = art.loss.shift_tensor
    old = shift(inputs["logprobs"], float("nan"))
    trained = shift(inputs["assistant_mask"], False).bool() & ~torch.isnan(old)
    group_ids = shift(inputs["group_ids"], -1)
    diff = new_logprobs.detach().double() - old.double()
    rows = []
    for row in range(group_ids.shape[0]):
        ids, values = group_ids[row][trained[row]], diff[row][trained[row]]
        unique, index = torch.unique(ids, return_inverse=True)
        sums = torch.zeros(len(unique), dtype=torch.float64, device=values.device)
        counts = torch.zeros_like(sums)
        sums.index_add_(0, index, values)
        counts.index_add_(0, index, torch.ones_like(values))
        means = (sums / counts).tolist()
        rows.append(dict(zip((int(i) for i in unique.tolist()), means, strict=True)))
    return rows


def mask_sequences(
    inputs: Any, new_logprobs: torch.Tensor, band: tuple[float, float]
) -> tuple[Any, int]:
    """`inputs` with weight 0 on every sequence whose geometric-mean ratio is outside
    `band` (edges kept, up to float rounding), and how many sequences that is. The given
    inputs are left as they were."""
    low, high = math.log(band[0]), math.log(band[1])
    weights = inputs["weights"].clone()
    masked = 0
    for row, ratios in enumerate(sequence_log_ratios(inputs, new_logprobs)):
        out = [
            gid
            for gid, log_ratio in ratios.items()
            if log_ratio < low - BAND_EDGE_TOLERANCE or log_ratio > high + BAND_EDGE_TOLERANCE
        ]
        if out:
            drop = torch.isin(inputs["group_ids"][row], torch.tensor(out, device=weights.device))
            weights[row] = weights[row].masked_fill(drop, 0.0)
            masked += len(out)
    return {**inputs, "weights": weights}, masked
