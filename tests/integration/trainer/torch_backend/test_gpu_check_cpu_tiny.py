"""The device check's CPU preset (bench/gpu_check.py --preset cpu-tiny): a random-init tiny
Qwen3 through TorchBackend in fp32, in bf16 and with every layer checkpointed, each passing
the step's correctness checks, and the measuring path run once (it runs first on a GPU
machine otherwise, where a failure costs a device call)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from repo_paths import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def one_rank(module_tmp: Callable[[str], Path]) -> tuple[Path, dict[str, Any]]:
    """The whole preset, on one rank."""
    out = module_tmp("one-rank")
    return out, _check(out)


def test_cpu_tiny_preset_passes_every_check(one_rank: tuple[Path, dict[str, Any]]) -> None:
    out, runs = one_rank
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
    log = (out / "gpu_check.log").read_text().splitlines()
    assert "tiny-bf16.ok=True" in log


def test_two_ranks_check_the_step_as_one_rank_does(
    one_rank: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """`--world 2` (what a machine of several GPUs runs): the fp32 run on 2 gloo ranks
    (torchrun), the base sharded, passes the same checks with one rank's loss (the tiny
    model's init, the groups and ART's packing are seeded)."""
    runs = _check(tmp_path, "--world", "2", "--only", "tiny-fp32")
    run, alone = runs["tiny-fp32"], one_rank[1]["tiny-fp32"]
    assert run["status"] == "ok" and run["ok"] and run["world"] == 2, run
    assert run["checkpoint_equals_live"] and run["optimizer_reloads"], run
    assert run["loss"] == pytest.approx(alone["loss"], rel=1e-4, abs=1e-9)


def _check(out: Path, *options: str) -> dict[str, Any]:
    check = [sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--preset", "cpu-tiny"]
    done = subprocess.run(
        [*check, *options, "--out", str(out), "--deadline-s", "800"],
        capture_output=True,
        text=True,
        timeout=880,
    )
    report = out / "gpu_check.json"
    runs: dict[str, Any] = json.loads(report.read_text())["runs"] if report.exists() else {}
    tails = "".join(f"\n== {name}:\n{run.get('log_tail', '')}" for name, run in runs.items())
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:] + tails[-6000:]
    return runs
