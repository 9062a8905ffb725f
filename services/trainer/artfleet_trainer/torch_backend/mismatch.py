"""How far the trainer's logprobs are from the sampler's, per trained token.

Every step, for each token that is trained (assistant mask) and has a sampler logprob (not
NaN), with r = trainer_lp - sampler_lp (the log of the importance ratio the loss uses):
- |r|: its mean and p99;
- k3 = mean(exp(r) - 1 - r), Schulman's estimator of KL(sampler || trainer) from the
  sampler's own tokens (non-negative per token, unbiased);
- the ratio exp(r): its p1, p50 and p99, and the share of tokens outside [0.9, 1.1] and
  outside [0.5, 2.0].
Positions line up as in ART's loss: the logprob at position t scores token t+1, so the
sampler's logprobs and the mask are shifted by one (`art.loss.shift_tensor`).
Quantiles interpolate linearly between order statistics (numpy's default).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.jobs.mismatch import PREFIX


@dataclass(frozen=True)
class Mismatch:
    tokens: int
    abs_delta_mean: float
    abs_delta_p99: float
    k3: float
    ratio_p1: float
    ratio_p50: float
    ratio_p99: float
    outside_0_9_1_1: float  # share of tokens whose ratio is outside [0.9, 1.1]
    outside_0_5_2: float  # ... outside [0.5, 2.0]

    def metrics(self) -> dict[str, float]:
        return {PREFIX + name: float(value) for name, value in asdict(self).items()}


def token_log_ratios(new_logprobs: torch.Tensor, inputs: Any) -> torch.Tensor:
    """trainer_lp - sampler_lp of each counted token of a row (1-D, fp64, on the CPU).
    `new_logprobs` [B, S]: position t scores token t+1 (ART's convention)."""
    sampler = art.loss.shift_tensor(inputs["logprobs"], float("nan"))
    trained = art.loss.shift_tensor(inputs["assistant_mask"], False).bool()
    counted = trained & ~torch.isnan(sampler)
    return (new_logprobs.detach().double() - sampler.double())[counted].cpu()


def quantile(ordered: torch.Tensor, q: float) -> float:
    """The q-quantile of sorted values, linearly interpolated (torch.quantile has a size
    limit a large step's tokens can pass)."""
    position = q * (ordered.numel() - 1)
    low, high = math.floor(position), math.ceil(position)
    a, b = float(ordered[low]), float(ordered[high])
    return a + (b - a) * (position - low)


def _outside(ratio: torch.Tensor, low: float, high: float) -> float:
    return float(((ratio < low) | (ratio > high)).double().mean())


def figures(log_ratios: Sequence[torch.Tensor]) -> Mismatch | None:
    """The step's figures from its rows' `token_log_ratios`; None when no token counted."""
    r = torch.cat([t.double().flatten() for t in log_ratios]) if log_ratios else None
    if r is None or r.numel() == 0:
        return None
    ratio = r.exp()
    ordered_ratio = ratio.sort().values
    ordered_abs = r.abs().sort().values
    return Mismatch(
        tokens=int(r.numel()),
        abs_delta_mean=float(r.abs().mean()),
        abs_delta_p99=quantile(ordered_abs, 0.99),
        k3=float((ratio - 1 - r).mean()),
        ratio_p1=quantile(ordered_ratio, 0.01),
        ratio_p50=quantile(ordered_ratio, 0.5),
        ratio_p99=quantile(ordered_ratio, 0.99),
        outside_0_9_1_1=_outside(ratio, 0.9, 1.1),
        outside_0_5_2=_outside(ratio, 0.5, 2.0),
    )
