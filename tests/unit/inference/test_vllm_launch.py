"""The vLLM command line the service builds (artfleet_inference.vllm_server.vllm_launch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from artfleet_inference.settings import InferenceSettings
from artfleet_inference.vllm_server import vllm_launch, why


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> InferenceSettings:
    monkeypatch.setenv("ARTFLEET_API_TOKEN", "a-real-token-for-tests")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return InferenceSettings()  # type: ignore[call-arg]  # from the environment


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_cpu_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARTFLEET_SOMETHING", "not for vllm")
    settings = _settings(monkeypatch, ARTFLEET_INFERENCE_VLLM_PYTHON="/opt/vllm/bin/python")
    launch = vllm_launch(settings, Path("/models/m"), "m", 1234, "k")
    argv = launch.argv
    assert argv[:3] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert _flag(argv, "--host") == "127.0.0.1"  # never faces the network
    assert _flag(argv, "--port") == "1234" and "--api-key=k" in argv
    assert "--return-tokens-as-token-ids" in argv and "--enable-lora" in argv
    assert _flag(argv, "--tool-call-parser") == "hermes"
    assert "--enable-prefix-caching" in argv
    assert launch.env["VLLM_CPU_KVCACHE_SPACE"] == "2"
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
