"""A model's LoRA starts from its seed (ART's `peft_args.random_state`, where a job's seed
goes): one seed, one starting adapter, whether the base was loaded for it or already held
another tenant, whatever torch's global generator had drawn before; another seed, another
adapter. A tiny random Llama stands in for SmolLM2 (no download)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import torch
from api_fleet import tiny_model

from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import TorchBackend


@pytest.fixture(scope="module")
def model_dir(module_tmp: Callable[[str], Path]) -> Path:
    return tiny_model(module_tmp("tiny") / "model")


@pytest.fixture
async def backends(tmp_path: Path) -> AsyncIterator[tuple[TorchBackend, TorchBackend]]:
    one = TorchBackend(path=str(tmp_path / "one"), num_threads=1, train_num_threads=1)
    two = TorchBackend(path=str(tmp_path / "two"), num_threads=1, train_num_threads=1)
    try:
        yield one, two
    finally:
        await one.close()
        await two.close()


async def _adapter(
    backend: TorchBackend, name: str, base: Path, seed: int
) -> dict[str, torch.Tensor]:
    model: art.TrainableModel = art.TrainableModel(
        name=name,
        project="t",
        base_model=str(base),
        _internal_config=art.dev.InternalModelConfig(
            peft_args=art.dev.PeftArgs(r=4, lora_alpha=8, random_state=seed)
        ),
    )
    await backend.register_model(model)
    weights = backend.peft_model_of(model).adapter_state()
    return {k: v.detach().clone() for k, v in weights.items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


async def test_one_seed_one_starting_adapter(
    backends: tuple[TorchBackend, TorchBackend], model_dir: Path
) -> None:
    one, two = backends
    first = await _adapter(one, "first", model_dir, seed=5)  # the base loaded for it
    assert any(k.endswith("lora_A.weight") and v.abs().sum() > 0 for k, v in first.items())
    beside = await _adapter(one, "beside", model_dir, seed=5)  # a second tenant of the base
    torch.rand(1000)  # whatever the global generator drew meanwhile
    elsewhere = await _adapter(two, "elsewhere", model_dir, seed=5)  # another trainer
    assert _same(first, beside) and _same(first, elsewhere)
    other = await _adapter(one, "other", model_dir, seed=6)
    assert not _same(first, other)
