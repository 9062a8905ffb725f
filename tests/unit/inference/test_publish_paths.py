"""How a published checkpoint reaches vLLM: merged from memory (vLLM's worker merges the
factors itself), merged from a written folder, or a runtime LoRA unloaded then loaded
(artfleet_inference.vllm_worker, engine.prepare_reload, engine.PolicyEngine.publish)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from lora_files import WEIGHTS, write_adapter, write_base, write_full
from safetensors.torch import load_file

from artfleet_inference import lora_math, vllm_worker
from artfleet_inference.engine import PolicyEngine, prepare_reload
from artfleet_inference.policies import PolicyTable, PublishRefused
from artfleet_inference.settings import InferenceSettings


def _checkpoint(folder: Path, seed: int = 2, rank: int = 4, alpha: int = 8) -> Path:
    write_adapter(folder, seed, rank, alpha)
    return folder


class _Worker(vllm_worker.PolicyWeights):
    """vLLM's worker as the extension sees it: `reload_weights(weights_iterator=...)`."""

    def __init__(self) -> None:
        self.loaded: dict[str, torch.Tensor] = {}

    def reload_weights(self, weights_iterator: Any) -> None:
        self.loaded = dict(weights_iterator)


def test_weights_merged_in_memory_equal_the_merged_folder(tmp_path: Path) -> None:
    base = write_base(tmp_path / "base")
    ckpt = _checkpoint(tmp_path / "ckpt")
    folder_rpc = prepare_reload("disk", tmp_path / "base", ckpt, tmp_path / "work", 1)
    assert folder_rpc == {
        "method": "reload_weights",
        "kwargs": {"weights_path": str(tmp_path / "work" / "merged-1")},
    }
    on_disk = load_file(str(tmp_path / "work" / "merged-1" / "model.safetensors"))
    (tmp_path / "work2").mkdir()
    rpc = prepare_reload("memory", tmp_path / "base", ckpt, tmp_path / "work2", 0)
    assert rpc["method"] == "artfleet_load_policy"
    assert not (tmp_path / "work2" / "merged-0").exists()  # no model folder written
    worker = _Worker()
    worker.artfleet_load_policy(**rpc["kwargs"])
    assert set(worker.loaded) == set(base)  # every weight, the unadapted ones too
    for name, weight in on_disk.items():
        assert torch.equal(worker.loaded[name], weight)  # one formula, bit for bit
    assert not torch.equal(worker.loaded["model.layers.0.q_proj.weight"], base[next(iter(WEIGHTS))])


def test_no_factors_is_the_base_model(tmp_path: Path) -> None:
    base = write_base(tmp_path / "base")
    worker = _Worker()
    worker.artfleet_load_policy(str(tmp_path / "base"))
    assert all(torch.equal(worker.loaded[k], w) for k, w in base.items())


def test_factors_for_an_unknown_weight_move_nothing(tmp_path: Path) -> None:
    write_base(tmp_path / "base")
    factors = {"model.layers.9.q_proj.weight": (torch.zeros(2, 5), torch.zeros(6, 2))}
    vllm_worker.save_factors(factors, tmp_path / "f.safetensors")
    worker = _Worker()
    with pytest.raises(ValueError, match=r"model\.layers\.9\.q_proj"):
        worker.artfleet_load_policy(str(tmp_path / "base"), str(tmp_path / "f.safetensors"))
    assert worker.loaded == {}  # vLLM's weights untouched


def test_factors_round_trip(tmp_path: Path) -> None:
    factors = {"w.weight": (torch.randn(2, 3), torch.randn(4, 2))}
    vllm_worker.save_factors(factors, tmp_path / "f.safetensors")
    (a, b), (a2, b2) = (
        factors["w.weight"],
        vllm_worker.load_factors(tmp_path / "f.safetensors")["w.weight"],
    )
    assert torch.equal(a, a2) and torch.equal(b, b2)


@pytest.mark.parametrize(("device", "mode"), [("cpu", "merged"), ("cuda", "lora")])
def test_auto_policy_mode_per_device(
    monkeypatch: pytest.MonkeyPatch, device: str, mode: str
) -> None:
    monkeypatch.setenv("ARTFLEET_API_TOKEN", "a-real-token-for-tests")
    monkeypatch.setenv("ARTFLEET_INFERENCE_DEVICE", device)
    settings = InferenceSettings()  # type: ignore[call-arg]  # from the environment
    assert settings.inference_policy_mode == "auto" and settings.policy_mode == mode
    monkeypatch.setenv("ARTFLEET_INFERENCE_POLICY_MODE", "merged")
    assert InferenceSettings().policy_mode == "merged"  # type: ignore[call-arg]


class _Engine(PolicyEngine):
    """The engine with vLLM's control calls recorded instead of sent."""

    def __init__(self, mode: Any, tmp_path: Path, merge_path: Any = "memory") -> None:
        table = PolicyTable("base", mode, lambda name, step: None)
        super().__init__(table, "http://v", "k", tmp_path / "base", tmp_path / "work", merge_path)
        self.calls: list[tuple[str, Any]] = []

    async def _call(self, path: str, body: Any = None) -> None:
        self.calls.append((path, body))


async def test_lora_mode_publishes_unload_then_load_under_versioned_names(
    tmp_path: Path,
) -> None:
    engine = _Engine("lora", tmp_path)
    ckpt1, ckpt2 = _checkpoint(tmp_path / "c1"), _checkpoint(tmp_path / "c2", seed=3)
    await engine.publish("pol", 1, ckpt1)
    await engine.publish("pol", 2, ckpt2)
    assert engine.calls == [
        ("/v1/load_lora_adapter", {"lora_name": "pol@1", "lora_path": str(ckpt1)}),
        ("/v1/load_lora_adapter", {"lora_name": "pol@2", "lora_path": str(ckpt2)}),
    ]
    engine.calls.clear()
    # The same step published again (a new job under the same name): vLLM must read it
    # again, never answer from the adapter it kept, and no load_inplace.
    await engine.publish("pol", 2, ckpt1)
    assert engine.calls == [
        ("/v1/unload_lora_adapter", {"lora_name": "pol@2"}),
        ("/v1/load_lora_adapter", {"lora_name": "pol@2", "lora_path": str(ckpt1)}),
    ]
    assert all("load_inplace" not in (body or {}) for _, body in engine.calls)


@pytest.mark.parametrize("merge_path", ["memory", "disk"])
async def test_merged_mode_reloads_then_resets_the_prefix_cache(
    tmp_path: Path, merge_path: str
) -> None:
    write_base(tmp_path / "base")
    engine = _Engine("merged", tmp_path, merge_path)
    engine._workdir.mkdir()
    await engine.publish("pol", 1, _checkpoint(tmp_path / "c1"))
    (rpc_path, rpc), (reset, _) = engine.calls
    assert (rpc_path, reset) == ("/collective_rpc", "/reset_prefix_cache")
    method = {"memory": "artfleet_load_policy", "disk": "reload_weights"}[merge_path]
    assert rpc["method"] == method
    assert engine.table.merged is not None and engine.table.merged[:2] == ("pol", 1)
    assert engine.table.route("pol@1").vllm_model == "base"  # served by vLLM's own weights


@pytest.mark.parametrize("merge_path", ["memory", "disk"])
def test_a_full_checkpoint_is_reloaded_from_its_own_folder(tmp_path: Path, merge_path: Any) -> None:
    """Nothing is merged or written: vLLM reads the checkpoint's top-level safetensors."""
    write_base(tmp_path / "base")
    ckpt = tmp_path / "full" / "0003"
    weights = write_full(ckpt)
    (tmp_path / "work").mkdir()
    rpc = prepare_reload(merge_path, tmp_path / "base", ckpt, tmp_path / "work", 1)
    assert rpc == _full_reload(merge_path, ckpt)
    assert list((tmp_path / "work").iterdir()) == []
    if merge_path == "memory":
        worker = _Worker()
        worker.artfleet_load_policy(**rpc["kwargs"])
        assert set(worker.loaded) == set(weights)  # optimizer/ is not read
        assert all(torch.equal(worker.loaded[k], w) for k, w in weights.items())


def _full_reload(merge_path: str, checkpoint: Path) -> dict[str, object]:
    """The rpc that reloads vLLM's weights from a full checkpoint's own folder."""
    if merge_path == "memory":
        kwargs = {"base_dir": str(checkpoint), "factors_path": ""}
        return {"method": "artfleet_load_policy", "kwargs": kwargs}
    return {"method": "reload_weights", "kwargs": {"weights_path": str(checkpoint)}}


def test_an_adapter_reader_refuses_a_full_checkpoint(tmp_path: Path) -> None:
    write_full(tmp_path / "full")
    with pytest.raises(lora_math.AdapterError, match="full fine-tune's checkpoint"):
        lora_math.read_adapter(tmp_path / "full")


@pytest.mark.parametrize(
    ("mode", "merge_path"), [("merged", "memory"), ("merged", "disk"), ("lora", "memory")]
)
async def test_a_full_publish_reloads_vllms_weights_in_either_mode(
    tmp_path: Path, mode: str, merge_path: str
) -> None:
    write_base(tmp_path / "base")
    engine = _Engine(mode, tmp_path, merge_path)
    engine._workdir.mkdir()
    await engine.publish("pol", 1, _checkpoint(tmp_path / "c1"))
    await engine.ensure_adapter(engine.table.route("base"))  # a LoRA in vLLM (merged: a diff)
    engine.calls.clear()
    ckpt = tmp_path / "ft" / "0002"
    write_full(ckpt)
    await engine.publish("ft", 2, ckpt)
    (rpc_path, rpc), (reset, _), *unloads = engine.calls
    assert (rpc_path, reset) == ("/collective_rpc", "/reset_prefix_cache")
    assert rpc == _full_reload(merge_path, ckpt)
    # Every LoRA registered was a difference to the old weights (or to the base): gone.
    assert unloads and all(path == "/v1/unload_lora_adapter" for path, _ in unloads)
    assert engine.table.route("ft").vllm_model == "base"  # vLLM's own weights


async def test_a_lora_publish_after_a_full_one_is_refused(tmp_path: Path) -> None:
    write_base(tmp_path / "base")
    engine = _Engine("merged", tmp_path)
    engine._workdir.mkdir()
    write_full(tmp_path / "ft" / "0005")
    await engine.publish("ft", 5, tmp_path / "ft" / "0005")
    engine.calls.clear()
    with pytest.raises(PublishRefused, match="full fine-tune ft@5") as refused:
        await engine.publish("pol", 1, _checkpoint(tmp_path / "c1"))
    assert refused.value.param == "checkpoint"
    assert engine.calls == []  # vLLM untouched
    assert set(engine.table.latest) == {"ft"}
