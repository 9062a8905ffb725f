"""Small base-model and peft-adapter files on disk, for the inference service's LoRA math
and publish paths (tests/unit/inference)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from artfleet_inference import lora_math

PREFIX = "base_model.model."
WEIGHTS = {"model.layers.0.q_proj.weight": (6, 5), "model.layers.0.down_proj.weight": (5, 7)}


def write_base(folder: Path) -> dict[str, torch.Tensor]:
    """A base model's safetensors (two adapted weights and a norm); returns its weights."""
    folder.mkdir(parents=True)
    torch.manual_seed(1)
    weights = {k: torch.randn(*shape) for k, shape in WEIGHTS.items()}
    weights["model.norm.weight"] = torch.ones(5)
    save_file(weights, str(folder / "model.safetensors"))
    (folder / "config.json").write_text("{}")
    return weights


def write_adapter(folder: Path, seed: int, rank: int, alpha: int) -> dict[str, torch.Tensor]:
    """A peft-format adapter; returns each weight's delta s·B·A."""
    torch.manual_seed(seed)
    folder.mkdir(parents=True)
    tensors, deltas = {}, {}
    for name, (out, inp) in WEIGHTS.items():
        a, b = torch.randn(rank, inp), torch.randn(out, rank)
        module = name.removesuffix(".weight")
        tensors[f"{PREFIX}{module}.lora_A.weight"] = a
        tensors[f"{PREFIX}{module}.lora_B.weight"] = b
        deltas[name] = (alpha / rank) * b @ a
    save_file(tensors, str(folder / lora_math.ADAPTER_WEIGHTS))
    config = {"r": rank, "lora_alpha": alpha, "target_modules": ["q_proj", "down_proj"]}
    (folder / lora_math.ADAPTER_CONFIG).write_text(json.dumps(config))
    return deltas


def write_full(folder: Path, seed: int = 5) -> dict[str, torch.Tensor]:
    """A full fine-tune's checkpoint: a whole model folder (its own weights, config.json)
    with an `optimizer/` of DCP files beside, which no reader of the weights may read (a
    stray safetensors file there included); returns its weights."""
    folder.mkdir(parents=True)
    torch.manual_seed(seed)
    weights = {k: torch.randn(*shape) for k, shape in WEIGHTS.items()}
    weights["model.norm.weight"] = torch.full((5,), 2.0)
    save_file(weights, str(folder / "model.safetensors"))
    (folder / "config.json").write_text("{}")
    (folder / "optimizer").mkdir()
    (folder / "optimizer" / "__0_0.distcp").write_bytes(b"not weights")
    save_file(
        {"exp_avg.model.norm.weight": torch.zeros(5)}, str(folder / "optimizer" / "x.safetensors")
    )
    return weights
