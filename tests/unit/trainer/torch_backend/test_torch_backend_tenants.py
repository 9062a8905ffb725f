"""Many tenants, one base (torch_backend/tenants.py) on a tiny random Llama wearing
SmolLM2's tokenizer: a tenant's step on the shared base equals the same step on a base of
its own, touches no other tenant's adapter, and saves the layout a private model saves;
the base is loaded once and leaves with its last tenant."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import torch
from api_fleet import tiny_model
from repo_paths import FIXTURES
from safetensors.torch import load_file

from artfleet.specs.sft import SftModel
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.sft.data import load_samples
from artfleet_trainer.sft.phase import to_trajectories
from artfleet_trainer.torch_backend import TorchBackend, checkpoints

OFFLINE_SAMPLES = FIXTURES / "sft" / "offline_samples.json"


@pytest.fixture(scope="module")
def model_dir(module_tmp: Callable[[str], Path]) -> Path:
    return tiny_model(module_tmp("tiny") / "model")


def _model(name: str, base: Path, rank: int) -> art.TrainableModel:
    return art.TrainableModel(
        name=name,
        project="t",
        base_model=str(base),
        _internal_config=art.dev.InternalModelConfig(
            peft_args=art.dev.PeftArgs(r=rank, lora_alpha=2 * rank)
        ),
    )


async def _register(backend: TorchBackend, model: art.TrainableModel, seed: int) -> None:
    with torch.random.fork_rng(devices=[]):  # the LoRA's init, as a Tinker client seeds it
        torch.manual_seed(seed)
        await backend.register_model(model)


async def _sft(backend: TorchBackend, model: art.TrainableModel) -> None:
    trajectories = to_trajectories(
        load_samples(SftModel(data_path=str(OFFLINE_SAMPLES), min_score=0.5)).samples
    )
    async for _ in backend.train_sft(model, trajectories, learning_rate=1e-2, batch_size=2):
        pass


def _weights(backend: TorchBackend, model: art.TrainableModel) -> dict[str, torch.Tensor]:
    tenant = backend.peft_model_of(model)
    return {k: v.detach().clone() for k, v in tenant.adapter_state().items()}


@pytest.fixture
async def backends(tmp_path: Path) -> AsyncIterator[tuple[TorchBackend, TorchBackend]]:
    private = TorchBackend(path=str(tmp_path / "private"), num_threads=1, train_num_threads=1)
    shared = TorchBackend(path=str(tmp_path / "shared"), num_threads=1, train_num_threads=1)
    try:
        yield private, shared
    finally:
        await private.close()
        await shared.close()


async def test_a_tenants_step_on_the_shared_base_equals_its_step_on_a_base_of_its_own(
    backends: tuple[TorchBackend, TorchBackend], model_dir: Path
) -> None:
    private, shared = backends
    alone = _model("x", model_dir, 4)
    await _register(private, alone, seed=5)
    await _sft(private, alone)

    other, x = _model("other", model_dir, 8), _model("x", model_dir, 4)
    await _register(shared, other, seed=9)
    await _register(shared, x, seed=5)
    assert shared.bases.loads == 1 and shared.bases.tenants_of(str(model_dir)) == ["other", "x"]
    await _sft(shared, other)  # the other tenant trains first: x's adapter must not move
    other_trained = _weights(shared, other)
    await _sft(shared, x)

    mine, theirs = _weights(shared, x), _weights(private, alone)
    assert mine.keys() == theirs.keys() and mine
    assert any(t.abs().sum() > 0 for k, t in mine.items() if "lora_B" in k)  # it trained
    for key, tensor in theirs.items():
        torch.testing.assert_close(mine[key], tensor, rtol=0, atol=1e-6)
    for key, tensor in _weights(shared, other).items():  # x's step left it as it was
        assert torch.equal(tensor, other_trained[key]), key

    # The checkpoint is the layout a private model saves: one adapter, its own rank.
    saved = checkpoints.checkpoint_dir(checkpoints.model_dir(shared.path, x), 1)
    alone_saved = checkpoints.checkpoint_dir(checkpoints.model_dir(private.path, alone), 1)
    assert sorted(p.name for p in saved.iterdir()) == sorted(p.name for p in alone_saved.iterdir())
    assert json.loads((saved / "adapter_config.json").read_text())["r"] == 4
    assert load_file(saved / "adapter_model.safetensors").keys() == theirs.keys()


async def test_the_base_is_kept_while_a_tenant_has_it(
    backends: tuple[TorchBackend, TorchBackend], model_dir: Path
) -> None:
    _, shared = backends
    a, b = _model("a", model_dir, 4), _model("b", model_dir, 16)
    await _register(shared, a, seed=1)
    await _register(shared, b, seed=2)
    await shared.unregister("a")
    assert shared.bases.tenants_of(str(model_dir)) == ["b"] and len(shared.bases) == 1
    await _sft(shared, b)  # the one left still trains, alone on the base
    await shared.unregister("b")
    assert len(shared.bases) == 0  # the base left with its last tenant
    again = _model("a", model_dir, 4)
    await _register(shared, again, seed=1)  # resumes from its saved adapter
    assert shared.bases.loads == 2 and shared.served_step(again) == 0
