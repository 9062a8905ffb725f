"""The trainer on several GPUs (artfleet.contracts.gpus_plan): FSDP2 ranks and vLLM,
colocated or split, from the one-GPU plan's per-component formulas; and the docs' table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import ROOT

from artfleet.contracts import gpu_plan
from artfleet.contracts.gpu_plan import (
    H100_80GB_BYTES,
    HEADROOM_FRACTION,
    KV_SEQUENCES,
    QWEN3,
    GiB,
    ModelShape,
    VllmLimits,
    plan_gpu,
    vllm_fixed_bytes,
)
from artfleet.contracts.gpus_plan import (
    MULTI_GPU_MODELS,
    markdown_table,
    plan_gpus,
    tp_sizes,
    trainer_rank,
)
from artfleet.contracts.model_configs import LLAMA31, QWEN3_LARGE

QWEN3_32B = QWEN3_LARGE["Qwen3-32B"]
LLAMA_70B = LLAMA31["Llama-3.1-70B-Instruct"]
H100 = H100_80GB_BYTES
USABLE = H100 - int(H100 * HEADROOM_FRACTION)


@pytest.mark.parametrize(("config", "billions"), [(QWEN3_32B, 32.8), (LLAMA_70B, 70.6)])
def test_the_large_models_parameter_counts_are_the_published_ones(
    config: dict[str, object], billions: float
) -> None:
    assert ModelShape.from_config(config).params() / 1e9 == pytest.approx(billions, rel=0.005)


def test_one_rank_counts_what_the_one_gpu_plan_counts_plus_the_gathered_layers() -> None:
    """The same formulas: LoRA on one GPU is plan_gpu's trainer and vLLM at tp 1."""
    config = QWEN3["Qwen3-4B"]
    one = plan_gpu(config, H100, max_model_len=16384)
    plan = plan_gpus(config, 1, H100, context=16384)
    shape = ModelShape.from_config(config)
    assert plan.world == plan.vllm_gpus == plan.vllm_tp == plan.vllm_replicas == 1
    assert plan.rank.gathered_layer_bytes == 2 * shape.layer_params() * 2  # two, bf16
    assert plan.trainer_rank_bytes - plan.rank.gathered_layer_bytes == one.trainer_peak_bytes
    kv = KV_SEQUENCES * 16384 * one.kv_bytes_per_token
    assert plan.vllm_need_bytes == one.vllm_fixed_bytes + kv


@pytest.mark.parametrize("config", [QWEN3_32B, LLAMA_70B])
def test_the_base_shard_halves_from_one_rank_to_two(config: dict[str, object]) -> None:
    one = plan_gpus(config, 1, 4 * H100, context=4096).rank
    two = plan_gpus(config, 2, 4 * H100, context=4096).rank
    shape = ModelShape.from_config(config)
    assert one.base_shard_bytes == shape.params() * 2  # the whole bf16 base
    assert two.gathered_layer_bytes == one.gathered_layer_bytes  # a layer is whole on each
    held_one = one.base_shard_bytes + one.gathered_layer_bytes
    held_two = two.base_shard_bytes + two.gathered_layer_bytes
    assert abs(held_two - held_one / 2) <= one.gathered_layer_bytes
    # LoRA tenants are replicated, not sharded; the row is each rank's own.
    assert two.tenant_bytes == one.tenant_bytes > 0 and two.optimizer_shard_bytes == 0
    assert two.activation_bytes == one.activation_bytes


def test_full_fine_tuning_shards_18_bytes_a_parameter() -> None:
    shape = ModelShape.from_config(LLAMA_70B)
    one = trainer_rank(shape, 1, 4096, "full")
    two = trainer_rank(shape, 2, 4096, "full")
    assert one.base_shard_bytes + one.optimizer_shard_bytes == 18 * shape.params()
    assert one.tenant_bytes == 0  # no adapters: every weight trains
    assert two.total <= 0.55 * one.total
    # No fp32 adapter copying its inputs: a full fine-tune's row keeps less than LoRA's.
    assert one.activation_bytes < trainer_rank(shape, 1, 4096, "lora").activation_bytes


def test_a_70b_full_fine_tune_does_not_fit_one_gpu_and_says_by_how_much() -> None:
    plan = plan_gpus(LLAMA_70B, 1, H100, finetune="full")
    assert not plan.fits and plan.refusal is not None
    assert plan.trainer_rank_bytes > 18 * 70e9  # ~1191 GiB
    assert f"needs {plan.trainer_rank_bytes / GiB:.1f} GiB" in plan.refusal
    assert f"the {USABLE / GiB:.1f} GiB it has" in plan.refusal
    assert "DOES NOT FIT" in plan.summary()


@pytest.mark.parametrize("colocate", [True, False])
def test_a_70b_lora_fits_eight_h100s(colocate: bool) -> None:
    plan = plan_gpus(LLAMA_70B, 8, H100, colocate=colocate)
    assert plan.fits and plan.refusal is None, plan.summary()
    assert plan.max_model_len >= 8192
    assert plan.trainer_rank_bytes <= plan.trainer_room_bytes
    assert plan.vllm_need_bytes <= plan.vllm_bytes
    assert plan.kv_sequences >= KV_SEQUENCES


def test_a_full_fine_tune_fits_once_the_world_is_large_enough() -> None:
    assert not plan_gpus(QWEN3_32B, 8, H100, finetune="full").fits
    plan = plan_gpus(QWEN3_32B, 16, H100, finetune="full")
    assert plan.fits and plan.world == 16 and plan.rank.optimizer_shard_bytes > 0


def test_tp_is_a_power_of_two_dividing_the_gpus() -> None:
    assert tp_sizes(8) == [1, 2, 4, 8] and tp_sizes(6) == [1, 2] and tp_sizes(1) == [1]
    for gpus in range(1, 17):
        for config in (QWEN3_32B, LLAMA_70B):
            for colocate in (True, False) if gpus > 1 else (True,):
                plan = plan_gpus(config, gpus, H100, colocate=colocate)
                tp = plan.vllm_tp
                assert tp & (tp - 1) == 0, (gpus, colocate, tp)
                assert plan.vllm_gpus % tp == 0 and plan.vllm_replicas * tp == plan.vllm_gpus
                assert gpus % tp == 0 if colocate else plan.vllm_gpus < gpus


def test_colocated_vllm_takes_the_least_tp_that_fits() -> None:
    plan = plan_gpus(QWEN3_32B, 8, H100, context=16384)
    assert plan.fits and plan.vllm_tp > 1 and plan.vllm_replicas == 8 // plan.vllm_tp
    shape = ModelShape.from_config(QWEN3_32B)
    limits = VllmLimits.defaults_for(H100)

    def need(tp: int) -> int:
        kv = KV_SEQUENCES * 16384 * shape.kv_bytes_per_token(2, tp)
        return vllm_fixed_bytes(shape, limits, 2, 2, 16, tp) + kv

    room = USABLE - plan.trainer_rank_bytes
    assert need(plan.vllm_tp) == plan.vllm_need_bytes <= room < need(plan.vllm_tp // 2)
    assert plan.world == plan.vllm_gpus == 8  # every GPU: a rank and a part of vLLM
    assert plan.trainer_room_bytes == H100 - plan.vllm_bytes - int(H100 * HEADROOM_FRACTION)


def test_tensor_parallel_splits_the_kv_heads_and_replicates_beyond_them() -> None:
    shape = ModelShape.from_config(LLAMA_70B)  # 8 KV heads
    assert shape.kv_bytes_per_token(2, 4) * 4 == shape.kv_bytes_per_token(2)
    assert shape.kv_bytes_per_token(2, 16) == shape.kv_bytes_per_token(2, 8)


@pytest.mark.parametrize("config", [QWEN3_32B, LLAMA_70B])
def test_split_plans_give_vllm_whole_gpus(config: dict[str, object]) -> None:
    plan = plan_gpus(config, 8, H100, colocate=False)
    assert plan.vllm_gpus == plan.vllm_tp  # the least GPUs: one replica
    assert plan.world == 8 - plan.vllm_gpus >= 1
    assert plan.gpu_memory_utilization == 1 - HEADROOM_FRACTION
    assert plan.trainer_room_bytes == USABLE  # no vLLM share on a training GPU
    assert plan.rank == trainer_rank(
        ModelShape.from_config(config), plan.world, plan.max_model_len, "lora"
    )
    given = plan_gpus(config, 8, H100, colocate=False, vllm_gpus=4)
    assert (given.vllm_gpus, given.world) == (4, 4)
    assert given.vllm_replicas == 4 // given.vllm_tp


def test_a_vllm_that_no_split_holds_is_refused_with_its_figure() -> None:
    plan = plan_gpus(LLAMA_70B, 2, H100, colocate=False)  # one GPU for 131 GiB of weights
    assert not plan.fits and plan.refusal is not None
    assert f"vLLM needs {plan.vllm_need_bytes / GiB:.1f} GiB a GPU at tp 1" in plan.refusal


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"gpus": 0}, "gpus must be at least 1, got 0"),
        ({"gpus": -2, "colocate": False}, "gpus must be at least 1, got -2"),
        ({"gpus": 8, "colocate": False, "vllm_gpus": 9}, "vllm_gpus must be 1 to 7 of the 8"),
        ({"gpus": 8, "colocate": False, "vllm_gpus": 8}, "one at least trains"),
        ({"gpus": 8, "colocate": False, "vllm_gpus": 0}, "got 0"),
        ({"gpus": 1, "colocate": False}, "a split plan needs 2 GPUs at least"),
        ({"gpus": 8, "vllm_gpus": 2}, "vllm_gpus is for a split plan"),
        ({"gpus": 8, "finetune": "qlora"}, "finetune must be one of lora, full, got 'qlora'"),
        ({"gpus": 8, "tenants": 0}, "tenants must be at least 1"),
        ({"gpus": 8, "context": -1}, "context must be at least 1 token"),
    ],
)
def test_bad_inputs_are_refused_by_name(args: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        plan_gpus(LLAMA_70B, gpu_bytes=H100, **args)  # type: ignore[arg-type]


# --- the CLI and the docs ------------------------------------------------------------------


def test_the_cli_prints_a_several_gpu_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_70B))
    argv = ["--config", str(tmp_path), "--gpus", "8", "--split", "--finetune", "full"]
    assert gpu_plan.main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    plan = plan_gpus(LLAMA_70B, 8, H100, finetune="full", colocate=False)
    assert printed == json.loads(json.dumps(plan.as_dict()))
    assert printed["train_gpus"] == plan.world and printed["rank"]["optimizer_shard_bytes"] > 0
    assert gpu_plan.main(["--markdown-multi"]) == 0
    assert capsys.readouterr().out.strip() == markdown_table()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpus", "0", "--config", "CONFIG"], "gpus must be at least 1, got 0"),
        (["--gpus", "4", "--split", "--vllm-gpus", "4", "--config", "CONFIG"], "vllm_gpus"),
        (["--split"], "--finetune, --split and --vllm-gpus go with --gpus"),
        (["--gpus", "8"], "--gpus plans one model: give its --config"),
        (["--gpus", "8", "--config", "MISSING"], "--config"),
        (["--gpus", "8", "--config", "EMPTY"], "the model's config has no hidden_size"),
    ],
)
def test_the_cli_refuses_bad_input_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_70B))
    (tmp_path / "empty.json").write_text("{}")
    paths = {"CONFIG": tmp_path, "MISSING": tmp_path / "nothing", "EMPTY": tmp_path / "empty.json"}
    with pytest.raises(SystemExit) as exit_info:
        gpu_plan.main([str(paths.get(arg, arg)) for arg in argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_table_has_every_model_mode_and_vllm_placement() -> None:
    _, _, *rows = markdown_table().splitlines()
    assert len(rows) == len(MULTI_GPU_MODELS) * 4
    cells = [row.split(" | ") for row in rows]
    assert {(c[0].removeprefix("| "), c[1], c[2]) for c in cells} == {
        (name, finetune, vllm)
        for name in MULTI_GPU_MODELS
        for finetune in ("lora", "full")
        for vllm in ("colocated", "split")
    }
    lora_70b = [c for c in cells if c[0] == "| Llama-3.1-70B-Instruct" and c[1] == "lora"]
    assert all(c[-1] == "yes |" for c in lora_70b)


TABLE = re.compile(r"<!-- gpus-plan-table -->\n(.*?)\n<!-- /gpus-plan-table -->", re.S)


def test_the_docs_several_gpu_table_is_the_functions_output() -> None:
    found = TABLE.search((ROOT / "docs" / "deployment.md").read_text())
    assert found, "docs/deployment.md lacks the <!-- gpus-plan-table --> block"
    assert found.group(1).strip() == markdown_table(), (
        "docs/deployment.md's several-GPU table is stale: paste "
        "`python -m artfleet.contracts.gpu_plan --markdown-multi` between its markers"
    )


def test_the_plan_and_its_cli_import_no_torch() -> None:
    code = (
        "import sys, artfleet.contracts.gpus_plan, artfleet.contracts.gpu_plan_cli; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_lora_ranks_keep_the_output_head_whole_as_the_trainer_does() -> None:
    """torch_backend/ranks.py shards the decoder and keeps the head on every rank (a copy
    of its own when tied): Qwen3-32B's weights a rank halve to 0.51, not 0.50."""
    untied = ModelShape.from_config(QWEN3_LARGE["Qwen3-32B"])
    head = untied.vocab * untied.hidden * 2
    one, two = trainer_rank(untied, 1, 2048, "lora"), trainer_rank(untied, 2, 2048, "lora")
    assert one.head_bytes == 0 and two.head_bytes == head
    assert two.base_shard_bytes == -(-(untied.params() * 2 - head) // 2)
    ratio = (two.base_shard_bytes + two.head_bytes) / one.base_shard_bytes
    assert 0.51 < ratio < 0.52
    tied = ModelShape.from_config(QWEN3["Qwen3-4B"])  # the embeddings stay sharded
    assert trainer_rank(tied, 2, 2048, "lora").base_shard_bytes == -(-tied.params() * 2 // 2)
    assert trainer_rank(untied, 2, 2048, "full").head_bytes == 0
