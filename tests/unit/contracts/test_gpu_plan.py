"""The GPU plan (artfleet.contracts.gpu_plan): how one GPU is split between vLLM and the
trainer, from the model's config; and that the docs, compose and Kubernetes take it."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from repo_paths import ROOT

from artfleet.contracts import gpu_plan
from artfleet.contracts.gpu_plan import (
    H100_80GB_BYTES,
    KV_SEQUENCES,
    QWEN3,
    QWEN3_TINY,
    GiB,
    LayerActivations,
    ModelShape,
    candidate_lengths,
    fit_max_model_len,
    markdown_table,
    plan_gpu,
    plan_tenants,
    trainer_fixed_bytes,
    trainer_row_bytes,
    trainer_shared_bytes,
)
from artfleet.contracts.gpu_tenants import TENANT_RANK, tenant_bytes

TINY = QWEN3_TINY | {"vocab_size": 1000, "max_position_embeddings": 512}


@pytest.mark.parametrize(
    ("name", "billions"),
    [("Qwen3-0.6B", 0.596), ("Qwen3-4B", 4.02), ("Qwen3-8B", 8.19), ("Qwen3-14B", 14.77)],
)
def test_qwen3_parameter_counts_are_the_published_ones(name: str, billions: float) -> None:
    assert ModelShape.from_config(QWEN3[name]).params() / 1e9 == pytest.approx(billions, rel=0.01)


def test_a_tiny_model_counted_by_hand() -> None:
    shape = ModelShape.from_config(TINY)
    attention, kv = 4 * 16, 2 * 16
    layer = 64 * attention + 2 * 64 * kv + attention * 64 + 3 * 64 * 128
    layer += 2 * 64 + 2 * 16  # the two RMSNorms, Qwen3's q/k norms
    assert shape.params() == 2 * layer + 1000 * 64 + 64  # tied: one embedding
    rank8 = 8 * (64 + 64 + 2 * (64 + 32) + 64 + 64 + 2 * (64 + 128) + 128 + 64)
    assert shape.lora_params(8) == 2 * rank8
    assert shape.kv_bytes_per_token(2) == 2 * 2 * 2 * 16 * 2
    plan = plan_gpu(TINY, 8 * GiB)
    assert plan.fits and plan.max_model_len == 512  # its own context: shorter than the cap
    assert plan.kv_sequences >= KV_SEQUENCES
    assert plan.vllm_bytes + plan.trainer_bytes == plan.gpu_total_bytes
    assert plan.trainer_memory_fraction == pytest.approx(1 - plan.gpu_memory_utilization)


def test_a_model_the_gpu_cannot_hold_gets_the_shortest_context_and_no_fit() -> None:
    plan = plan_gpu(QWEN3["Qwen3-14B"], 24 * GiB)
    assert not plan.fits and plan.max_model_len == gpu_plan.MIN_MAX_MODEL_LEN
    assert "DOES NOT FIT" in plan.summary()


def test_14b_gets_more_than_the_old_share_and_still_a_kv_cache() -> None:
    plan = plan_gpu(QWEN3["Qwen3-14B"], H100_80GB_BYTES)
    assert plan.fits and plan.gpu_memory_utilization > 0.4
    assert plan.kv_cache_bytes >= KV_SEQUENCES * plan.max_model_len * plan.kv_bytes_per_token
    assert plan.kv_sequences >= KV_SEQUENCES
    assert plan.trainer_peak_bytes <= plan.trainer_bytes  # the trainer's least fits its part
    # The old fixed 0.4 (finding #15): 27.5 GiB of weights leave too little.
    old = plan_gpu(QWEN3["Qwen3-14B"], H100_80GB_BYTES, gpu_memory_utilization=0.4)
    assert not old.fits and old.gpu_memory_utilization == 0.4


def test_8b_in_fp32_is_twice_bf16_and_costs_context() -> None:
    bf16 = plan_gpu(QWEN3["Qwen3-8B"], H100_80GB_BYTES)
    fp32 = plan_gpu(QWEN3["Qwen3-8B"], H100_80GB_BYTES, weight_bytes=4)
    assert bf16.weight_bytes_fp32 == 2 * bf16.weight_bytes_bf16
    assert bf16.weight_bytes_bf16 / GiB == pytest.approx(15.3, abs=0.1)  # the note's table
    assert fp32.kv_bytes_per_token == 2 * bf16.kv_bytes_per_token
    assert fp32.vllm_fixed_bytes > bf16.vllm_fixed_bytes + 15 * GiB
    assert fp32.max_model_len < bf16.max_model_len


def test_every_qwen3_model_fits_an_h100_with_a_real_context() -> None:
    for name, config in QWEN3.items():
        plan = plan_gpu(config, H100_80GB_BYTES)
        assert plan.fits, name
        assert plan.max_model_len >= 8192, name  # 2048 refused real episodes (#14)
        assert plan.max_model_len <= 32768, name


def test_a_given_length_or_share_is_kept() -> None:
    plan = plan_gpu(QWEN3["Qwen3-4B"], H100_80GB_BYTES, max_model_len=10000)
    assert plan.max_model_len == 10000 and plan.fits
    plan = plan_gpu(QWEN3["Qwen3-4B"], H100_80GB_BYTES, gpu_memory_utilization=0.45)
    assert plan.gpu_memory_utilization == 0.45 and plan.fits
    assert plan.kv_cache_bytes >= KV_SEQUENCES * plan.max_model_len * plan.kv_bytes_per_token


def test_candidate_lengths() -> None:
    assert candidate_lengths(40960) == [32768, 16384, 8192, 4096, 2048]
    assert candidate_lengths(8192) == [8192, 4096, 2048]
    assert candidate_lengths(1000) == [1000]


def test_a_fixed_kv_cache_fits_its_sequences() -> None:
    smollm = {**TINY, "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9}
    smollm |= {"num_key_value_heads": 3, "head_dim": 64, "max_position_embeddings": 8192}
    assert fit_max_model_len(smollm, 2 * GiB, 4) == 8192  # 4 x 8192 x 45 KiB < 2 GiB
    assert fit_max_model_len(smollm, 1 * GiB, 4) == 4096
    assert fit_max_model_len(smollm, 1, 4) == 2048  # none fits: the shortest


def test_activation_sizes_are_the_trainers_documented_ones() -> None:
    """activation_memory.py's docstring: SmolLM2-135M in fp32 keeps 1.27 MB + 0.2 MB per
    token; an fp32 adapter on a bf16 base adds its inputs' copies."""
    smollm = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30}
    smollm |= {"num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152}
    sizes = LayerActivations.of(smollm, 4)
    assert sizes.layers * sizes.full_layer == pytest.approx(1.27e6, rel=0.01)
    assert sizes.logits == pytest.approx(0.2e6, rel=0.02)
    mixed = LayerActivations.of(smollm, 2, adapter_bytes=4)
    assert mixed.full_layer == sizes.full_layer // 2 + (6 * 576 + 576 + 1536) * 4
    assert mixed.checkpointed_layer == 576 * 2 and mixed.logits == sizes.logits


def test_a_config_object_and_a_nested_text_config_read_alike() -> None:
    class Config:
        def __init__(self, values: dict[str, object]) -> None:
            self.__dict__.update(values)

    shape = ModelShape.from_config(QWEN3["Qwen3-8B"])
    assert ModelShape.from_config(Config(QWEN3["Qwen3-8B"])) == shape
    assert ModelShape.from_config({"text_config": QWEN3["Qwen3-8B"]}) == shape


def test_the_cli_prints_a_models_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3["Qwen3-4B"]))
    assert gpu_plan.main(["--config", str(tmp_path), "--gpu-mib", "81559"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == plan_gpu(QWEN3["Qwen3-4B"], H100_80GB_BYTES).as_dict()
    assert printed["tenants"] > 0 and printed["tenant_rank"] == TENANT_RANK
    assert gpu_plan.main(["--markdown"]) == 0
    assert capsys.readouterr().out.strip() == markdown_table()


def test_the_module_imports_no_torch() -> None:
    """The inference service's Python has no torch, and benchmarks import QWEN3 cheaply."""
    code = "import sys, artfleet.contracts.gpu_plan; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- tenants: many LoRA adapters on the trainer's one base --------------------------------


def test_the_plan_counts_tenants_in_the_trainers_share() -> None:
    config = QWEN3["Qwen3-4B"]
    shape = ModelShape.from_config(config)
    plan = plan_gpu(config, H100_80GB_BYTES)
    shared = trainer_shared_bytes(shape, plan.max_model_len)
    assert shared == trainer_fixed_bytes(shape, 0) + trainer_row_bytes(shape, plan.max_model_len)
    room = plan.trainer_bytes - int(H100_80GB_BYTES * gpu_plan.HEADROOM_FRACTION) - shared
    assert plan.tenant_rank == TENANT_RANK
    assert plan.tenants == room // tenant_bytes(shape, TENANT_RANK) > 0
    # The trainer's fixed part still counts its one rank-8 LoRA: tenants change no plan.
    assert plan.trainer_fixed_bytes == trainer_fixed_bytes(shape, 0) + tenant_bytes(shape, 8)
    other = plan_gpu(config, H100_80GB_BYTES, tenant_rank=8)
    assert dataclasses.replace(other, tenant_rank=plan.tenant_rank, tenants=plan.tenants) == plan


def test_more_trainer_memory_fits_more_tenants_and_a_larger_rank_fewer() -> None:
    config = QWEN3["Qwen3-4B"]
    shares = [0.6, 0.55, 0.5, 0.45]  # vLLM's: falling, so the trainer's grows
    counts = [
        plan_gpu(config, H100_80GB_BYTES, gpu_memory_utilization=u, max_model_len=16384).tenants
        for u in shares  # at one context: the shared row stays the same
    ]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    ranks = [plan_gpu(config, H100_80GB_BYTES, tenant_rank=r).tenants for r in (8, 16, 32, 64)]
    assert ranks == sorted(ranks, reverse=True) and ranks[0] > ranks[-1]


def test_plan_tenants_counts_the_vllm_slots_that_serve_them() -> None:
    config = QWEN3["Qwen3-0.6B"]
    shape = ModelShape.from_config(config)
    single = plan_gpu(config, H100_80GB_BYTES)
    plan = plan_tenants(config, H100_80GB_BYTES)
    assert single.fits and single.max_model_len == 32768  # as before tenants
    assert single.gpu_memory_utilization == 0.547  # the docs' row
    assert (single.max_loras, single.max_lora_rank) == (2, 16)  # the inference defaults
    assert plan.fits and plan.tenants > 8 and plan.max_model_len == single.max_model_len
    assert (plan.max_loras, plan.max_lora_rank) == (8, 32)
    slots = (8 * shape.lora_params(32) - 2 * shape.lora_params(16)) * 2  # bf16
    assert plan.vllm_fixed_bytes - single.vllm_fixed_bytes == slots
    assert plan.gpu_memory_utilization >= single.gpu_memory_utilization
    # A rank vLLM does not offer is served in the next slot size up.
    assert plan_tenants(config, H100_80GB_BYTES, tenant_rank=24).max_lora_rank == 32


def test_plan_tenants_gives_no_more_slots_than_tenants() -> None:
    for name, config in QWEN3.items():
        plan = plan_tenants(config, H100_80GB_BYTES)
        assert plan.fits, name
        assert 1 <= plan.max_loras <= max(1, min(plan.tenants, 8)), name
    big = plan_tenants(QWEN3["Qwen3-14B"], H100_80GB_BYTES)
    assert big.tenants == 0 and big.max_loras == 1  # its activation room holds no rank 32


def test_the_table_counts_tenants_for_every_model() -> None:
    header, _, *rows = markdown_table().splitlines()
    column = header.split(" | ").index(f"rank-{TENANT_RANK} tenants (vLLM's LoRA slots)")
    assert len(rows) == len(QWEN3)
    for (name, config), row in zip(QWEN3.items(), rows, strict=True):
        cells = row.split(" | ")
        at = plan_gpu(config, H100_80GB_BYTES).max_model_len  # the row's context
        plan = plan_tenants(config, H100_80GB_BYTES, max_model_len=at)
        assert cells[0] == f"| {name}" and cells[column] == f"{plan.tenants} ({plan.max_loras})"
    assert int(rows[0].split(" | ")[column].split()[0]) > 8  # Qwen3-0.6B


# --- the one source: docs, compose, Kubernetes ---------------------------------------------

TABLE = re.compile(r"<!-- gpu-plan-table -->\n(.*?)\n<!-- /gpu-plan-table -->", re.S)


def test_the_docs_table_is_the_functions_output() -> None:
    found = TABLE.search((ROOT / "docs" / "deployment.md").read_text())
    assert found, "docs/deployment.md lacks the <!-- gpu-plan-table --> block"
    assert found.group(1).strip() == markdown_table(), (
        "docs/deployment.md's GPU table is stale: paste "
        "`python -m artfleet.contracts.gpu_plan --markdown` between its markers"
    )


def test_the_gpu_stacks_take_the_plan_not_a_written_share() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = compose["services"]["inference"]["environment"]
    assert env["ARTFLEET_INFERENCE_GPU_MEMORY_UTILIZATION"].endswith(":-auto}")
    assert env["ARTFLEET_INFERENCE_MAX_MODEL_LEN"].endswith(":-auto}")
    overlay = yaml.safe_load((ROOT / "deploy/kubernetes/overlays/gpu/inference.yaml").read_text())
    container = overlay["spec"]["template"]["spec"]["containers"][0]
    values = {e["name"]: e["value"] for e in container["env"]}
    assert values["ARTFLEET_INFERENCE_GPU_MEMORY_UTILIZATION"] == "auto"
    assert values["ARTFLEET_INFERENCE_MAX_MODEL_LEN"] == "auto"
