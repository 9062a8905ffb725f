"""The vLLM command line the service builds (artfleet_inference.vllm_server.vllm_launch)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from artfleet.contracts.gpu_plan import H100_80GB_BYTES, QWEN3, GiB, MiB, VllmLimits, plan_gpu
from artfleet_inference import vllm_main
from artfleet_inference.cpu_memory import KvCacheError, MachineMemory
from artfleet_inference.engine import MAX_REGISTERED_ADAPTERS
from artfleet_inference.settings import InferenceSettings
from artfleet_inference.vllm_server import (
    gpu_total_bytes,
    launch_memory,
    lora_flags,
    resolve_launch_memory,
    vllm_launch,
    vllm_limits,
    why,
)


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> InferenceSettings:
    """Settings from `env`; a fixed 2 GiB KV cache unless `env` says (`auto` reads the
    machine's memory: tests/unit/inference/test_cpu_memory.py)."""
    monkeypatch.setenv("ARTFLEET_API_TOKEN", "a-real-token-for-tests")
    monkeypatch.setenv("ARTFLEET_INFERENCE_KV_CACHE_GIB", "2")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return InferenceSettings()  # type: ignore[call-arg]  # from the environment


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_cpu_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARTFLEET_SOMETHING", "not for vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")  # whole GiB; would override the flag
    settings = _settings(monkeypatch, ARTFLEET_INFERENCE_VLLM_PYTHON="/opt/vllm/bin/python")
    launch = vllm_launch(settings, Path("/models/m"), "m", 1234, "k")
    argv = launch.argv
    # vLLM's API server through vllm_main: its processes die with this one.
    assert argv[:3] == ["/opt/vllm/bin/python", "-m", "artfleet_inference.vllm_main"]
    assert launch.env[vllm_main.PARENT_ENV] == str(os.getpid())
    assert _flag(argv, "--host") == "127.0.0.1"  # never faces the network
    assert _flag(argv, "--port") == "1234" and "--api-key=k" in argv
    assert "--return-tokens-as-token-ids" in argv and "--enable-lora" in argv
    assert _flag(argv, "--tool-call-parser") == "hermes"
    assert "--enable-prefix-caching" in argv
    assert _flag(argv, "--kv-cache-memory-bytes") == str(2 * GiB)
    assert "VLLM_CPU_KVCACHE_SPACE" not in launch.env
    assert launch.env["VLLM_SERVER_DEV_MODE"] == "1"
    assert not any(k.startswith("ARTFLEET_") for k in launch.env)  # the token stays here
    assert "--gpu-memory-utilization" not in argv


def test_gpu_launch_and_extra_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(
        monkeypatch,
        ARTFLEET_INFERENCE_DEVICE="cuda",
        ARTFLEET_INFERENCE_GPU_MEMORY_UTILIZATION="0.3",
        ARTFLEET_INFERENCE_PREFIX_CACHING="false",
        ARTFLEET_INFERENCE_EXTRA_ARGS="--max-num-seqs 64 --seed 1",
    )
    argv = vllm_launch(settings, Path("/m"), "m", 1, "k").argv
    assert _flag(argv, "--gpu-memory-utilization") == "0.3"
    assert "--no-enable-prefix-caching" in argv
    assert argv[-4:] == ["--max-num-seqs", "64", "--seed", "1"]


def test_a_failed_start_names_the_root_cause() -> None:
    log = "\n".join(
        ["INFO starting"]
        + ["(VllmWorker pid=5) ERROR 11-24 [x.py:1] ImportError: libnuma.so.1: cannot open"]
        + [f"INFO noise {i}" for i in range(50)]
        + ["RuntimeError: Engine core initialization failed."]
    )
    summary = why(log)
    assert "libnuma.so.1" in summary and "Engine core initialization failed" in summary
    assert "noise 10" not in summary


def test_a_key_that_looks_like_a_flag_stays_the_keys_value(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = vllm_launch(_settings(monkeypatch), Path("/m"), "m", 1, "-Xy_z").argv
    assert "--api-key=-Xy_z" in argv and "-Xy_z" not in argv


# --- dtype, context and GPU share: `auto` from artfleet.contracts.gpu_plan ----------------

SMOLLM = {  # the embedded default's config.json (the shapes that matter)
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
    "dtype": "float32",
}


def test_defaults_keep_the_cpu_launch_and_take_bf16_on_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = vllm_launch(_settings(monkeypatch), Path("/m"), "m", 1, "k").argv
    assert _flag(argv, "--max-model-len") == "2048" and _flag(argv, "--dtype") == "float32"
    cuda = _settings(
        monkeypatch,
        ARTFLEET_INFERENCE_DEVICE="cuda",
        ARTFLEET_INFERENCE_GPU_MEMORY_UTILIZATION="0.5",
    )
    argv = vllm_launch(cuda, Path("/m"), "m", 1, "k").argv
    assert _flag(argv, "--dtype") == "auto"  # the checkpoint's own: bf16 for Qwen (#20)
    assert _flag(argv, "--gpu-memory-utilization") == "0.5"


def test_auto_on_cuda_takes_the_gpu_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(
        monkeypatch, ARTFLEET_INFERENCE_DEVICE="cuda", ARTFLEET_INFERENCE_MAX_MODEL_LEN="auto"
    )
    memory = launch_memory(settings, QWEN3["Qwen3-14B"], H100_80GB_BYTES)
    assert memory.plan == plan_gpu(QWEN3["Qwen3-14B"], H100_80GB_BYTES)  # the docs' numbers
    assert memory.plan.fits and memory.gpu_memory_utilization is not None
    assert memory.gpu_memory_utilization > 0.4  # #15: 14B needs more than the old share
    argv = vllm_launch(settings, Path("/m"), "m", 1, "k", memory).argv
    assert _flag(argv, "--max-model-len") == str(memory.plan.max_model_len)
    assert _flag(argv, "--gpu-memory-utilization") == f"{memory.gpu_memory_utilization:g}"


def test_a_number_for_one_setting_is_kept_and_auto_fills_the_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = _settings(
        monkeypatch,
        ARTFLEET_INFERENCE_DEVICE="cuda",
        ARTFLEET_INFERENCE_GPU_MEMORY_UTILIZATION="0.4",
        ARTFLEET_INFERENCE_MAX_MODEL_LEN="auto",
    )
    memory = launch_memory(settings, QWEN3["Qwen3-8B"], H100_80GB_BYTES)
    assert memory.gpu_memory_utilization == 0.4 and memory.plan is not None
    assert memory.max_model_len == memory.plan.max_model_len == 16384
    fixed_len = _settings(
        monkeypatch,
        ARTFLEET_INFERENCE_GPU_MEMORY_UTILIZATION="auto",
        ARTFLEET_INFERENCE_MAX_MODEL_LEN="4096",
    )
    memory = launch_memory(fixed_len, QWEN3["Qwen3-8B"], H100_80GB_BYTES)
    assert memory.max_model_len == 4096 and memory.gpu_memory_utilization is not None


def test_the_plan_counts_vllm_flags_given_as_extra_args(monkeypatch: pytest.MonkeyPatch) -> None:
    base = _settings(monkeypatch, ARTFLEET_INFERENCE_DEVICE="cuda")
    fewer = _settings(
        monkeypatch,
        ARTFLEET_INFERENCE_DEVICE="cuda",
        ARTFLEET_INFERENCE_EXTRA_ARGS="--max-num-seqs 64 --max-num-batched-tokens=4096",
    )
    assert vllm_limits(fewer, H100_80GB_BYTES) == VllmLimits(64, 4096)
    full = launch_memory(base, QWEN3["Qwen3-4B"], H100_80GB_BYTES).plan
    small = launch_memory(fewer, QWEN3["Qwen3-4B"], H100_80GB_BYTES).plan
    assert full is not None and small is not None
    assert small.vllm_fixed_bytes < full.vllm_fixed_bytes  # a smaller sampler profile run


ROOMY = MachineMemory(64 * GiB, "MemAvailable")


def test_auto_on_a_cpu_fits_the_kv_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch, ARTFLEET_INFERENCE_MAX_MODEL_LEN="auto")
    memory = launch_memory(settings, SMOLLM, machine=ROOMY)
    assert memory.max_model_len == 8192 and memory.plan is None  # fp32: 4 x 8192 x 45 KiB
    assert memory.gpu_memory_utilization is None
    small = _settings(
        monkeypatch, ARTFLEET_INFERENCE_MAX_MODEL_LEN="auto", ARTFLEET_INFERENCE_KV_CACHE_GIB="1"
    )
    assert launch_memory(small, SMOLLM, machine=ROOMY).max_model_len == 4096
    argv = vllm_launch(settings, Path("/m"), "m", 1, "k", memory).argv
    assert _flag(argv, "--max-model-len") == "8192" and "--gpu-memory-utilization" not in argv


def test_a_fraction_of_a_gib_reaches_vllm_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's VLLM_CPU_KVCACHE_SPACE takes whole GiB (`int("0.5")` crashed it): the flag
    in bytes takes any size."""
    half = _settings(monkeypatch, ARTFLEET_INFERENCE_KV_CACHE_GIB="0.5")
    memory = launch_memory(half, SMOLLM, machine=ROOMY)
    assert memory.kv_cache_bytes == GiB // 2
    argv = vllm_launch(half, Path("/m"), "m", 1, "k", memory).argv
    assert _flag(argv, "--kv-cache-memory-bytes") == str(GiB // 2)


def test_auto_on_a_cpu_sizes_the_kv_cache_from_the_machine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = _settings(monkeypatch, ARTFLEET_INFERENCE_KV_CACHE_GIB="auto")
    assert launch_memory(settings, SMOLLM, machine=ROOMY).kv_cache_bytes == 2 * GiB  # the cap
    tight = MachineMemory(4 * GiB, "MemAvailable")  # weights 0.5, vLLM 2, margin 0.5
    kv = launch_memory(settings, SMOLLM, machine=tight).kv_cache_bytes
    assert kv is not None and 0.9 * GiB < kv < GiB
    with pytest.raises(ValueError, match=r"config\.json and the machine's memory"):
        launch_memory(settings)
    # Resolving reads the served model's config.json and this machine's memory.
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM))
    try:
        memory = resolve_launch_memory(settings, tmp_path)
    except KvCacheError as exc:  # a machine short of memory: refused, the setting named
        assert "ARTFLEET_INFERENCE_KV_CACHE_GIB=auto" in str(exc)
    else:
        assert memory.kv_cache_bytes is not None and memory.kv_cache_bytes <= 2 * GiB


def test_auto_without_the_config_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch, ARTFLEET_INFERENCE_DEVICE="cuda")  # the share: auto
    with pytest.raises(ValueError, match=r"config\.json"):
        vllm_launch(settings, Path("/m"), "m", 1, "k")
    with pytest.raises(ValueError, match="GPU's total memory"):
        launch_memory(settings, QWEN3["Qwen3-4B"])


def test_resolving_reads_the_served_models_config_and_the_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN3["Qwen3-8B"]))
    settings = _settings(
        monkeypatch,
        ARTFLEET_INFERENCE_DEVICE="cuda",
        ARTFLEET_INFERENCE_MAX_MODEL_LEN="auto",
        ARTFLEET_INFERENCE_GPU_MEMORY_MIB="81559",
    )
    memory = resolve_launch_memory(settings, tmp_path)
    assert memory.plan == plan_gpu(QWEN3["Qwen3-8B"], H100_80GB_BYTES)
    # Without the setting, nvidia-smi is asked (for the first GPU vLLM sees).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\necho 143771\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    settings = _settings(monkeypatch, ARTFLEET_INFERENCE_GPU_MEMORY_MIB="0")
    assert gpu_total_bytes(settings) == 143771 * MiB
    assert "-i 1" in (tmp_path / "args").read_text()


def test_max_cpu_loras_keeps_every_adapter_the_engine_registers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = vllm_launch(_settings(monkeypatch), Path("/m"), "m", 1, "k").argv
    assert _flag(argv, "--max-loras") == "2"
    assert _flag(argv, "--max-cpu-loras") == str(MAX_REGISTERED_ADAPTERS) == "8"
    many = _settings(monkeypatch, ARTFLEET_INFERENCE_MAX_LORAS="12")
    argv = vllm_launch(many, Path("/m"), "m", 1, "k").argv
    assert _flag(argv, "--max-cpu-loras") == "12"  # vLLM refuses fewer than max_loras


def test_tenants_size_the_lora_flags_from_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    tenants = _settings(
        monkeypatch, ARTFLEET_INFERENCE_TENANTS="12", ARTFLEET_INFERENCE_MAX_LORA_RANK="24"
    )
    argv = vllm_launch(tenants, Path("/m"), "m", 1, "k").argv
    assert _flag(argv, "--max-loras") == "8"  # slots in one batch: at most 8
    assert _flag(argv, "--max-cpu-loras") == "13"  # every tenant's policy, and one loading
    assert _flag(argv, "--max-lora-rank") == "32"  # rounded up to a rank vLLM takes
    assert lora_flags(tenants).max_cpu_loras == 13  # what the engine keeps registered
    few = _settings(monkeypatch, ARTFLEET_INFERENCE_TENANTS="2")
    assert _flag(vllm_launch(few, Path("/m"), "m", 1, "k").argv, "--max-cpu-loras") == "8"


def test_the_reasoning_parser_is_off_unless_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (
        "--reasoning-parser"
        not in vllm_launch(_settings(monkeypatch), Path("/m"), "m", 1, "k").argv
    )
    named = _settings(monkeypatch, ARTFLEET_INFERENCE_REASONING_PARSER="qwen3")
    argv = vllm_launch(named, Path("/m"), "m", 1, "k").argv
    assert _flag(argv, "--reasoning-parser") == "qwen3"


def test_vllms_python_finds_the_worker_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    """From a source checkout, vLLM's own Python imports `artfleet_inference.vllm_worker`
    (the merged weights' in-memory load) from the folder the launch puts on its path."""
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    launch = vllm_launch(_settings(monkeypatch), Path("/m"), "m", 1, "k")
    extension = _flag(launch.argv, "--worker-extension-cls")
    module, _, cls = extension.rpartition(".")
    assert (module, cls) == ("artfleet_inference.vllm_worker", "PolicyWeights")
    folder, rest = launch.env["PYTHONPATH"].split(os.pathsep)
    assert rest == "/elsewhere"
    assert (Path(folder) / "artfleet_inference" / "vllm_worker.py").is_file()
