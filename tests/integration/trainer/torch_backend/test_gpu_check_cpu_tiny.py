"""The device check's CPU preset (bench/gpu_check.py --preset cpu-tiny): a random-init tiny
Qwen3 through TorchBackend in fp32, in bf16 and with every layer checkpointed, each passing
the step's correctness checks, and the measuring path run once (it runs first on a GPU
machine otherwise, where a failure costs a device call)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from repo_paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_cpu_tiny_preset_passes_every_check(tmp_path: Path) -> None:
    check = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--preset", "cpu-tiny"]
    done = subprocess.run(
        [*check, "--out", str(tmp_path), "--deadline-s", "800"],
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    runs = report["runs"]
    assert set(runs) == {"tiny-fp32", "tiny-bf16", "tiny-bf16-checkpointed", "tiny-measure"}
    for name in ("tiny-fp32", "tiny-bf16", "tiny-bf16-checkpointed"):
        run = runs[name]
        assert run["status"] == "ok" and run["ok"], run
        assert run["loss_finite"] and run["checkpoint_equals_live"] and run["optimizer_reloads"]
        assert run["lora_changed_by_lr"], run["lora_max_change"]
    assert runs["tiny-fp32"]["checkpointed_layers"] == 0
    assert runs["tiny-bf16-checkpointed"]["checkpointed_layers"] == 2
    measured = runs["tiny-measure"]
    assert measured["status"] == "ok", measured.get("log_tail")
    assert measured["core_s"] > 0 and measured["plain_s"] > 0 and measured["full_s"] > 0
    assert measured["generate_tokens_per_s"] > 0
    log = (tmp_path / "gpu_check.log").read_text().splitlines()
    assert "tiny-bf16.ok=True" in log


def test_cpu_tiny_preset_passes_on_two_ranks_as_on_one(tmp_path: Path) -> None:
    """`--world 2`: each run on 2 gloo ranks (torchrun), the same checks and the same
    loss as one rank's (the tiny model's init and the groups are seeded)."""
    only = "tiny-fp32,tiny-bf16-checkpointed,tiny-measure"
    runs = _check(tmp_path / "two", "--world", "2", "--only", only)
    alone = _check(tmp_path / "one", "--only", "tiny-fp32")["tiny-fp32"]
    for name in ("tiny-fp32", "tiny-bf16-checkpointed"):
        run = runs[name]
        assert run["status"] == "ok" and run["ok"] and run["world"] == 2, run
    assert runs["tiny-fp32"]["loss"] == pytest.approx(alone["loss"], rel=1e-4, abs=1e-9)
    assert runs["tiny-bf16-checkpointed"]["checkpointed_layers"] == 2
    measured = runs["tiny-measure"]
    assert measured["status"] == "ok" and measured["full_s"] > 0, measured.get("log_tail")
    assert "core_s" not in measured  # rank 0 alone cannot run a sharded model's core


def _check(out: Path, *options: str) -> dict[str, Any]:
    check = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--preset", "cpu-tiny"]
    done = subprocess.run(
        [*check, *options, "--out", str(out), "--deadline-s", "800"],
        capture_output=True,
        text=True,
        timeout=880,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    runs: dict[str, Any] = json.loads((out / "gpu_check.json").read_text())["runs"]
    return runs
