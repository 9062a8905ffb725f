"""LoRA adapters as weights: merged into the base, or as the difference of two policies.

The trainer writes peft adapters (`adapter_config.json` + `adapter_model.safetensors`).
For vLLM's fast path (merged weights, no LoRA kernels) the service writes
`W + s·B·A` for every adapted weight. Older policies are then served as a LoRA on top of
those merged weights: the adapter `s_k·B_k·A_k − s_c·B_c·A_c`, which is exactly rank
`r_k + r_c` (B' = [s_k·B_k, −s_c·B_c], A' = [A_k; A_c]), so `name@k` and the base
model are still answered exactly while `name@c` is merged.

torch is imported inside the functions: the service's settings and routing stay light.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from artfleet.contracts.checkpoint_layout import ADAPTER_CONFIG, is_full_checkpoint
from artfleet_inference.vllm_worker import merged_weight

ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PEFT_PREFIX = "base_model.model."
# Files of a model folder that are not weights (vLLM reads its config and tokenizer there).
_MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
)


class AdapterError(ValueError):
    """An adapter folder that cannot be read as a peft LoRA."""


@dataclass
class Adapter:
    """Per base weight name (`model.layers.0.self_attn.q_proj.weight`): (A, s·B)."""

    factors: dict[str, tuple[Any, Any]]
    rank: int
    target_modules: list[str]


def import_tensor_libraries() -> None:
    """What reading and writing adapters imports (torch is slow to import)."""
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401


def read_adapter(folder: Path) -> Adapter:
    from safetensors.torch import load_file

    if is_full_checkpoint(folder):  # a whole model: reloaded as it is, never a LoRA
        raise AdapterError(f"{folder}: a full fine-tune's checkpoint, not a LoRA adapter")
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text())
        tensors = load_file(str(folder / ADAPTER_WEIGHTS))
    except (OSError, ValueError) as exc:
        raise AdapterError(f"{folder}: not a LoRA checkpoint ({exc})") from None
    rank = int(config["r"])
    alpha = float(config.get("lora_alpha", rank))
    scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    factors: dict[str, tuple[Any, Any]] = {}
    for key, a in tensors.items():
        if ".lora_A." not in key:
            continue
        b = tensors[key.replace(".lora_A.", ".lora_B.")]
        module = key.split(".lora_A.")[0].removeprefix(_PEFT_PREFIX)
        factors[f"{module}.weight"] = (a.float(), b.float() * scale)
    if not factors:
        raise AdapterError(f"{folder}: the adapter has no LoRA weights")
    targets = config.get("target_modules") or []
    return Adapter(factors, rank, sorted(targets) if isinstance(targets, list) else [targets])


def write_merged(base_dir: Path, adapter: Adapter | None, out_dir: Path) -> None:
    """A model folder with `adapter` merged into `base_dir`'s weights (None: the base's).

    Written beside `out_dir` and renamed over it, so a reader never sees half of it."""
    from safetensors.torch import load_file, save_file

    staging = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name in _MODEL_FILES:
        if (base_dir / name).is_file():
            shutil.copyfile(base_dir / name, staging / name)
    pending = dict(adapter.factors) if adapter else {}
    for shard in sorted(base_dir.glob("*.safetensors")):
        weights = load_file(str(shard))
        for key in list(weights):
            factor = pending.pop(key, None)
            if factor is not None:
                weights[key] = merged_weight(weights[key], *factor)
        save_file(weights, str(staging / shard.name), metadata={"format": "pt"})
    if (base_dir / "model.safetensors.index.json").is_file():
        index = "model.safetensors.index.json"
        shutil.copyfile(base_dir / index, staging / index)
    if pending:
        shutil.rmtree(staging, ignore_errors=True)
        raise AdapterError(f"adapter weights without a base weight: {sorted(pending)[:3]}")
    old = out_dir.with_name(out_dir.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out_dir.exists():
        os.rename(out_dir, old)
    os.rename(staging, out_dir)
    shutil.rmtree(old, ignore_errors=True)


def write_difference(target: Adapter | None, merged: Adapter | None, out_dir: Path) -> int:
    """A peft adapter that turns weights with `merged` merged in into weights with `target`
    (None: the base model's); returns its rank."""
    import torch
    from safetensors.torch import save_file

    names = sorted(set(target.factors if target else {}) | set(merged.factors if merged else {}))
    tensors: dict[str, Any] = {}
    rank = (target.rank if target else 0) + (merged.rank if merged else 0)
    targets = sorted(
        set(target.target_modules if target else []) | set(merged.target_modules if merged else [])
    )
    for name in names:
        a_parts, b_parts = [], []
        for adapter, sign in ((target, 1.0), (merged, -1.0)):
            if adapter is None:
                continue
            if name not in adapter.factors:  # the trainer's adapters all adapt the same
                raise AdapterError(f"adapters differ in the weights they adapt ({name})")
            a, b = adapter.factors[name]
            a_parts.append(a)
            b_parts.append(b * sign)
        module = name.removesuffix(".weight")
        tensors[f"{_PEFT_PREFIX}{module}.lora_A.weight"] = torch.cat(a_parts, 0).contiguous()
        tensors[f"{_PEFT_PREFIX}{module}.lora_B.weight"] = torch.cat(b_parts, 1).contiguous()
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": rank,  # scale 1: the factors above carry their own scales
        "target_modules": targets,
        "bias": "none",
        "lora_dropout": 0.0,
        "fan_in_fan_out": False,
        "task_type": "CAUSAL_LM",
        "modules_to_save": None,
    }
    (out_dir / ADAPTER_CONFIG).write_text(json.dumps(config))
    return rank
