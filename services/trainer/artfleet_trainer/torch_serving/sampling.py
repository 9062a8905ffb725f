"""Choosing each row's next token: temperature, top-k and top-p, as vLLM applies them
(top-k first, then top-p over what top-k kept), or greedy at temperature 0."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .generation import SamplingParams


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None],
) -> torch.Tensor:
    """One token per row from its temperature/top-k/top-p distribution."""
    device = logits.device
    temperatures = torch.tensor([p.temperature for p in params], device=device)
    probs = torch.softmax(logits / temperatures.clamp(min=1e-5).unsqueeze(1), dim=-1)
    top_ks = torch.tensor([p.top_k for p in params], device=device)
    if bool(((top_ks > 0) & (top_ks < probs.shape[-1])).any()):
        probs = top_k_filter(probs, top_ks)
    top_ps = torch.tensor([p.top_p for p in params], device=device)
    if bool((top_ps < 1.0).any()):
        probs = top_p_filter(probs, top_ps)
    tokens = torch.empty(len(params), dtype=torch.long, device=device)
    for i, (p, generator) in enumerate(zip(params, generators, strict=True)):
        if p.temperature <= 0:
            tokens[i] = torch.argmax(logits[i])
        else:
            tokens[i] = torch.multinomial(probs[i], 1, generator=generator)[0]
    return tokens


def top_k_filter(probs: torch.Tensor, top_ks: torch.Tensor) -> torch.Tensor:
    """Keep each row's `top_k` most likely tokens (0 or less: all), renormalized; a tie
    with the k-th keeps every tied token."""
    k_max = min(int(top_ks.max()), probs.shape[-1])
    kth = torch.topk(probs, k_max, dim=-1).values.gather(
        1, (top_ks.clamp(1, k_max) - 1).unsqueeze(1)
    )
    kth = torch.where((top_ks > 0).unsqueeze(1), kth, torch.zeros_like(kth))
    filtered = probs.masked_fill(probs < kth, 0.0)
    return filtered / filtered.sum(dim=-1, keepdim=True)


def top_p_filter(probs: torch.Tensor, top_ps: torch.Tensor) -> torch.Tensor:
    """Keep each row's smallest set of most likely tokens whose mass reaches its top_p."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_ps.unsqueeze(1), 0.0)
    filtered = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return filtered / filtered.sum(dim=-1, keepdim=True)
