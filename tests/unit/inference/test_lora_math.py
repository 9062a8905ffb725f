"""Merged weights and difference adapters are exact (artfleet_inference.lora_math)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lora_files import WEIGHTS, write_adapter, write_base
from safetensors.torch import load_file

from artfleet_inference import lora_math


def _applied(weights: dict[str, torch.Tensor], adapter_dir: Path) -> dict[str, torch.Tensor]:
    """What a LoRA runtime computes: W + (alpha/r)·B·A from the adapter folder."""
    adapter = lora_math.read_adapter(adapter_dir)
    return {k: w + adapter.factors[k][1] @ adapter.factors[k][0] if k in adapter.factors else w
            for k, w in weights.items()}  # fmt: skip


def test_merged_weights_are_base_plus_delta(tmp_path: Path) -> None:
    base = write_base(tmp_path / "base")
    delta = write_adapter(tmp_path / "ckpt", seed=2, rank=4, alpha=8)
    out = tmp_path / "merged"
    lora_math.write_merged(tmp_path / "base", lora_math.read_adapter(tmp_path / "ckpt"), out)
    merged = load_file(str(out / "model.safetensors"))
    for name in WEIGHTS:
        assert torch.allclose(merged[name], base[name] + delta[name], atol=1e-5)
    assert torch.equal(merged["model.norm.weight"], base["model.norm.weight"])
    assert (out / "config.json").is_file()
    # Written again over itself (the next publish): still whole.
    lora_math.write_merged(tmp_path / "base", None, out)
    assert torch.equal(load_file(str(out / "model.safetensors"))[next(iter(WEIGHTS))],
                       base[next(iter(WEIGHTS))])  # fmt: skip


@pytest.mark.parametrize("target_seed", [3, None])
def test_difference_adapter_turns_merged_weights_into_the_target(
    tmp_path: Path, target_seed: int | None
) -> None:
    base = write_base(tmp_path / "base")
    merged_delta = write_adapter(tmp_path / "merged-ckpt", seed=2, rank=4, alpha=8)
    target = None
    target_delta = {k: torch.zeros(s) for k, s in WEIGHTS.items()}
    if target_seed is not None:
        target_delta = write_adapter(tmp_path / "target", seed=target_seed, rank=4, alpha=16)
        target = lora_math.read_adapter(tmp_path / "target")
    merged_weights = {k: w + merged_delta.get(k, 0) for k, w in base.items()}
    rank = lora_math.write_difference(
        target, lora_math.read_adapter(tmp_path / "merged-ckpt"), tmp_path / "diff"
    )
    assert rank == (8 if target is not None else 4)
    served = _applied(merged_weights, tmp_path / "diff")
    for name in WEIGHTS:
        assert torch.allclose(served[name], base[name] + target_delta[name], atol=1e-4)


def test_a_folder_without_an_adapter_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(lora_math.AdapterError, match="not a LoRA checkpoint"):
        lora_math.read_adapter(tmp_path)
