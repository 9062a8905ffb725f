"""The driver floor and the start-up error when CUDA is requested and not usable
(artfleet.runtime.cuda_driver), and the trainer's and the inference service's hooks, on
fake /proc text, fake Pythons and version strings: no GPU needed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from artfleet.runtime import cuda_driver
from artfleet.runtime.cuda_driver import (
    TorchCuda,
    cuda_problem,
    driver_floor,
    driver_from_proc,
    floor_line,
    probe_torch,
    read_driver_version,
    show,
)

PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 18:56:32 UTC 2023\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
OPEN = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Sun Jul 27 06:54:38 UTC 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
)
ARM = "NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.54.15  Tue Mar  5 22:15:33 UTC 2024\n"
CU13 = TorchCuda("2.13.0", "13.0", available=False)
CU128 = TorchCuda("2.13.0+cu128", "12.8", available=False)


def test_driver_version_from_each_kernel_module_text() -> None:
    assert driver_from_proc(PROPRIETARY) == "535.129.03"
    assert driver_from_proc(OPEN) == "580.65.06"  # not x86_64's 64, nor the GCC version
    assert driver_from_proc(ARM) == "550.54.15"
    assert driver_from_proc("GCC version:  gcc version 12.2.0\n") is None
    assert driver_from_proc("") is None


def test_floors_per_cuda_major_with_minor_version_compatibility() -> None:
    assert driver_floor("13.0") == driver_floor("13.2") == (580,)
    assert driver_floor("12.8") == driver_floor("12.6") == driver_floor("12.9") == (525, 60, 13)
    assert driver_floor("11.8") == (450, 80, 2)
    assert driver_floor("14.0") is None and driver_floor("") is None
    assert show((525, 60, 13)) == "525.60.13" and show((450, 80, 2)) == "450.80.02"
    assert show((580,)) == "580"


def test_read_driver_version_prefers_proc_then_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "version"
    proc.write_text(OPEN)
    assert read_driver_version(proc) == "580.65.06"
    # No module file and no nvidia-smi: the container sees no GPU.
    monkeypatch.setenv("PATH", str(tmp_path))
    assert read_driver_version(tmp_path / "absent") is None
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1" = --query-gpu=driver_version ] && echo 570.133.20\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    assert read_driver_version(tmp_path / "absent") == "570.133.20"


def test_usable_cuda_is_no_problem_and_the_floor_line_names_both_versions() -> None:
    usable = TorchCuda("2.13.0", "13.0", available=True)
    assert cuda_problem("the trainer", usable, "580.65.06") is None
    line = floor_line("the trainer", usable, "580.65.06")
    assert "CUDA 13.0" in line and ">= 580;" in line and "host driver: 580.65.06" in line
    assert "12.8: needs NVIDIA driver >= 525.60.13" in floor_line("vLLM", CU128, None)
    assert "none found" in floor_line("vLLM", CU128, None)
    assert "CPU build" in floor_line("the trainer", TorchCuda("2.13.0+cpu", None, False), None)


def test_old_driver_names_the_driver_the_floor_and_the_wheels_cuda() -> None:
    message = cuda_problem("the trainer", CU13, "575.57.08")
    assert message is not None
    assert "driver 575.57.08 is older than 580, the minimum for CUDA 13.0" in message
    assert "torch 2.13.0 is built for CUDA 13.0" in message
    assert "CUDA_FLAVOUR" in message and "TORCH_INDEX_URL" in message
    assert "GPU images and CUDA drivers" in message
    # CUDA 12.x runs on 525.60.13 and newer (minor version compatibility), not below.
    old12 = cuda_problem("vLLM", CU128, "520.61.05")
    assert old12 is not None and "older than 525.60.13, the minimum for CUDA 12.8" in old12
    assert "older than" not in (cuda_problem("vLLM", CU128, "535.129.03") or "")


def test_other_reasons_cuda_is_not_usable_say_what_is_missing() -> None:
    no_driver = cuda_problem("vLLM", CU13, None)
    assert no_driver is not None and "no NVIDIA driver is visible" in no_driver
    assert "built for CUDA 13.0" in no_driver
    cpu = cuda_problem("the trainer", TorchCuda("2.13.0+cpu", None, False), "580.65.06")
    assert cpu is not None and "CPU build" in cpu
    hidden = cuda_problem("the trainer", CU13, "580.65.06")
    assert hidden is not None and "meets the floor for CUDA 13.0" in hidden
    assert "CUDA_VISIBLE_DEVICES" in hidden


def _fake_python(folder: Path, body: str) -> str:
    script = folder / "python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_probe_asks_another_python_and_names_it_when_it_cannot_answer(tmp_path: Path) -> None:
    good = _fake_python(tmp_path, 'echo "some warning"; echo \'["2.13.0", "13.0", false]\'')
    assert probe_torch(good) == CU13
    (tmp_path / "bad").mkdir()
    bad = _fake_python(tmp_path / "bad", "echo 'ModuleNotFoundError: torch' >&2; exit 1")
    with pytest.raises(RuntimeError, match="cannot import torch: ModuleNotFoundError"):
        probe_torch(bad)
    with pytest.raises(RuntimeError, match="cannot ask"):
        probe_torch(str(tmp_path / "missing"))


def test_the_real_probe_reads_this_pythons_torch() -> None:
    import sys

    import torch

    facts = probe_torch(sys.executable)
    assert facts.version == torch.__version__ and facts.cuda == torch.version.cuda


def test_inference_start_check_stops_with_the_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from artfleet_inference.app import check_vllm_cuda

    monkeypatch.setattr("artfleet_inference.app.read_driver_version", lambda: "570.133.20")
    python = _fake_python(tmp_path, 'echo \'["2.13.0", "13.0", false]\'')
    with pytest.raises(SystemExit, match=r"driver 570\.133\.20 is older than 580"):
        check_vllm_cuda(python)
    (tmp_path / "ok").mkdir()
    check_vllm_cuda(_fake_python(tmp_path / "ok", 'echo \'["2.13.0", "13.0", true]\''))
    with pytest.raises(SystemExit, match="ARTFLEET_INFERENCE_VLLM_PYTHON"):
        check_vllm_cuda(os.fspath(tmp_path / "no-python"))


def test_trainer_start_check_only_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    from artfleet_trainer.backends import check_cuda

    check_cuda("cpu")  # nothing asked, nothing checked
    monkeypatch.setattr(cuda_driver, "read_driver_version", lambda: "575.57.08")
    import torch

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match=r"575\.57\.08 is older than 580, .* CUDA 13\.0"):
        check_cuda("cuda:0")
