"""A policy merged into vLLM's weights in memory (vLLM's `--worker-extension-cls`).

This module is imported inside vLLM's worker process, from vLLM's own Python (torch and
safetensors only: nothing else of ours is installed there). The front writes the policy's
LoRA factors (A, s·B per base weight name: a few MB) and calls vLLM's dev-mode
`/collective_rpc` with `artfleet_load_policy`; the worker reads the base model's shards
(page-cached, memory-mapped), merges `W + s·B·A` tensor by tensor and hands them to vLLM's
own `reload_weights(weights_iterator=...)`, so no merged model folder is written to disk
and read back (what `reload_weights(weights_path=...)` needs). Measured in
bench/inference_bench.py (docs/inference.md). A full fine-tune's checkpoint is loaded the
same way, its folder as `base_dir` and no factors.

`merged_weight` is the one formula for a merged weight: lora_math.write_merged uses it too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

FACTORS_FILE = "factors.safetensors"
_A, _B = ".lora_a", ".lora_sb"  # key suffixes in the factors file


def merged_weight(weight: Any, a: Any, b: Any) -> Any:
    """`W + B·A` (B already scaled), computed in float32, kept in W's dtype."""
    return (weight.float() + b @ a).to(weight.dtype)


def save_factors(factors: dict[str, tuple[Any, Any]], path: Path) -> None:
    """Write `{base weight name: (A, s·B)}` as one safetensors file (renamed into place)."""
    from safetensors.torch import save_file

    tensors: dict[str, Any] = {}
    for name, (a, b) in factors.items():
        tensors[name + _A] = a.contiguous()
        tensors[name + _B] = b.contiguous()
    staging = path.with_name(path.name + ".tmp")
    save_file(tensors, str(staging), metadata={"format": "pt"})
    staging.replace(path)


def load_factors(path: Path) -> dict[str, tuple[Any, Any]]:
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    return {
        key.removesuffix(_A): (a, tensors[key.removesuffix(_A) + _B])
        for key, a in tensors.items()
        if key.endswith(_A)
    }


def base_weight_names(base_dir: Path) -> set[str]:
    from safetensors import safe_open

    names: set[str] = set()
    for shard in sorted(base_dir.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            names.update(f.keys())
    return names


def merged_weights(
    base_dir: Path, factors: dict[str, tuple[Any, Any]]
) -> Iterator[tuple[str, Any]]:
    """Every weight of the base model, with the factors merged where they adapt one."""
    from safetensors import safe_open

    for shard in sorted(base_dir.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                weight = f.get_tensor(key)
                factor = factors.get(key)
                yield key, weight if factor is None else merged_weight(weight, *factor)


def check_factors(base_dir: Path, factors: dict[str, tuple[Any, Any]]) -> None:
    """Before any weight moves: every factor adapts a base weight (else vLLM would be left
    with half a policy)."""
    unknown = sorted(set(factors) - base_weight_names(base_dir))
    if unknown:
        raise ValueError(f"adapter weights without a base weight: {unknown[:3]}")


class PolicyWeights:
    """Mixed into vLLM's worker class (vLLM checks that no name collides with its own)."""

    def artfleet_load_policy(self, base_dir: str, factors_path: str = "") -> None:
        """Load `base_dir`'s weights with `factors_path`'s LoRA merged in (its own weights
        when empty: the base model's, or a full fine-tune's checkpoint folder, whose
        top-level `*.safetensors` only are read) through vLLM's in-place reload."""
        base = Path(base_dir)
        factors = load_factors(Path(factors_path)) if factors_path else {}
        check_factors(base, factors)
        worker: Any = self
        worker.reload_weights(weights_iterator=merged_weights(base, factors))
