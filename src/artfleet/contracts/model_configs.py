"""The config.json values that fix a model's memory, for the GPU plans' docs tables
(`gpu_plan`, `gpus_plan`) and for benchmarks that build random-init models of those shapes.

`QWEN3` holds the Qwen3 dense models that one GPU holds beside vLLM (the one-GPU table);
`QWEN3_LARGE` and `LLAMA31` the models that need several GPUs (the several-GPU table).
"""

from __future__ import annotations

from typing import Any

# The config.json values that fix each model's memory (Hugging Face Qwen/Qwen3-*; all
# four: head_dim 128, 8 KV heads, vocab 151936, max_position_embeddings 40960, bf16).
_QWEN3_COMMON: dict[str, Any] = {
    "model_type": "qwen3",
    "head_dim": 128,
    "num_key_value_heads": 8,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "attention_bias": False,
    "torch_dtype": "bfloat16",
}
QWEN3: dict[str, dict[str, Any]] = {
    "Qwen3-0.6B": {
        **_QWEN3_COMMON,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "tie_word_embeddings": True,
    },
    "Qwen3-4B": {
        **_QWEN3_COMMON,
        "hidden_size": 2560,
        "intermediate_size": 9728,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "tie_word_embeddings": True,
    },
    "Qwen3-8B": {
        **_QWEN3_COMMON,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "tie_word_embeddings": False,
    },
    "Qwen3-14B": {
        **_QWEN3_COMMON,
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 40,
        "num_attention_heads": 40,
        "tie_word_embeddings": False,
    },
}
# A random-init Qwen3 of the same family small enough for CPU checks (the device check's
# cpu-tiny preset, unit tests): 2 layers, 4 heads of 16, 2 KV heads.
QWEN3_TINY: dict[str, Any] = {
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}

# Qwen3's 32B dense model: its bf16 weights (61 GiB) leave one 80 GB GPU no room for a
# second copy, so it is not in QWEN3 (whose models each fit one GPU shared).
QWEN3_LARGE: dict[str, dict[str, Any]] = {
    "Qwen3-32B": {
        **_QWEN3_COMMON,
        "hidden_size": 5120,
        "intermediate_size": 25600,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "tie_word_embeddings": False,
    },
}
# Hugging Face meta-llama/Llama-3.1-70B-Instruct's config.json (the 70B of the several-GPU
# table; 3.3-70B has the same shape).
LLAMA31: dict[str, dict[str, Any]] = {
    "Llama-3.1-70B-Instruct": {
        "model_type": "llama",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "torch_dtype": "bfloat16",
    },
}
