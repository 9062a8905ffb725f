"""Prompt logprobs (vLLM's `prompt_logprobs`): how likely the model finds each prompt
token after the ones before it, as the Tinker-compatible API's `compute_logprobs` asks.

A forward pass of its own over the whole prompt, apart from the batch's prefill (which
keeps the last position's logits only and may start from a cached prefix). Logits come
from the decoder's hidden states and the output embeddings, chunk by chunk, as the
trainer computes its logprobs (training.compute_logprobs): the two agree for the same
weights, and a long prompt never holds all its logits at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

CHUNK_TOKENS = 256  # positions whose fp32 logits exist at once


@dataclass(frozen=True)
class PromptTokenLogprob:
    """One prompt position (from the second token on)."""

    token_id: int
    logprob: float
    # As vLLM ranks: how many tokens are at least as likely (1 = the most likely).
    rank: int
    top: tuple[tuple[int, float], ...] = ()  # the k most likely (id, logprob), best first


@torch.inference_mode()
def score_prompt(
    model: Any, prompt_ids: Sequence[int], k: int, device: torch.device
) -> list[PromptTokenLogprob]:
    """The raw-distribution logprob and rank of prompt tokens 1.. and, with k > 0, the k
    most likely tokens at each of those positions."""
    if len(prompt_ids) < 2:
        return []
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    hidden = base.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state[0, :-1]
    weight = base.get_output_embeddings().weight
    targets = ids[0, 1:]
    scores: list[PromptTokenLogprob] = []
    for start in range(0, targets.shape[0], CHUNK_TOKENS):
        chunk = slice(start, start + CHUNK_TOKENS)
        logits = torch.nn.functional.linear(hidden[chunk], weight).float()
        logprobs = torch.log_softmax(logits, dim=-1)
        chosen = logprobs.gather(1, targets[chunk].unsqueeze(1))
        ranks = (logprobs >= chosen).sum(dim=1).tolist()
        top = torch.topk(logprobs, min(k, logprobs.shape[-1]), dim=-1) if k > 0 else None
        for i, (token, logprob) in enumerate(
            zip(targets[chunk].tolist(), chosen.squeeze(1).tolist(), strict=True)
        ):
            best: tuple[tuple[int, float], ...] = ()
            if top is not None:
                best = tuple(zip(top.indices[i].tolist(), top.values[i].tolist(), strict=True))
            scores.append(PromptTokenLogprob(int(token), float(logprob), int(ranks[i]), best))
    return scores
