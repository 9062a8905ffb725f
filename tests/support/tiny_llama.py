"""A tiny random Llama for torch-backend tests: real code paths, milliseconds per step."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_llama(
    vocab_size: int,
    eos_token_id: int | None = None,
    max_position_embeddings: int = 256,
    tie_word_embeddings: bool = False,
) -> LlamaForCausalLM:
    torch.manual_seed(0)  # the same weights in every test that asks for the same shape
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        eos_token_id=eos_token_id,
        tie_word_embeddings=tie_word_embeddings,
    )
    return LlamaForCausalLM(config).eval()
