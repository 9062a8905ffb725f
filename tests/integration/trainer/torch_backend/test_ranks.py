"""The torch backend on 2 ranks (torchrun, gloo on this CPU) against one process on the same
rows: a GRPO step, an SFT batch and a Tinker-compatible forward_backward + optim_step
(tests/support/rank_steps.py) give the same figures and the same updated adapters.

Tolerances: fp32 sums taken in another order (each rank sums its rows, then the ranks
sum), relative 1e-4 on the figures; the adapters' difference within 1e-3 of how far
training moved them (lora_B starts at 0, so its norm is that movement). Adam's first steps
move a weight by about the rate times its gradient's sign, which the order of a sum flips
for gradients near 0: an element-wise bound would measure that, not the split.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

REPO = Path(__file__).resolve().parents[4]
SCRIPT = REPO / "tests" / "support" / "rank_steps.py"
TIMEOUT_S = 900  # two loads of the base and three steps, on a loaded 2-core machine


def _run(out: Path, ranks: int) -> dict[str, Any]:
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parent), *sys.path])}
    done = subprocess.run(
        [*launcher, str(SCRIPT), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"{ranks} rank(s) failed:\n{done.stderr[-4000:]}"
    figures: dict[str, Any] = json.loads((out / "figures.json").read_text())
    return figures


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, Path, dict[str, Any], dict[str, Any]]:
    one, two = tmp_path_factory.mktemp("one-rank"), tmp_path_factory.mktemp("two-ranks")
    return one, two, _run(one, 1), _run(two, 2)


@pytest.mark.parametrize("work", ["grpo", "sft", "tinker"])
def test_two_ranks_train_as_one_on_the_same_rows(runs: Any, work: str) -> None:
    one, two, alone, split = runs
    for figure, value in alone[work].items():
        if figure == "seconds" or figure.endswith("_max_diff"):
            continue
        assert split[work][figure] == pytest.approx(value, rel=1e-4, abs=1e-6), (work, figure)
    before, after = torch.load(one / f"{work}.pt"), torch.load(two / f"{work}.pt")
    assert before.keys() == after.keys()
    moved = _norm(v for k, v in before.items() if "lora_B" in k)
    differ = _norm(before[k] - after[k] for k in before)
    assert moved > 0, "the step moved nothing: nothing is compared"
    assert differ <= 1e-3 * moved, f"{work}: adapters differ by {differ:.3g}, moved {moved:.3g}"


def _norm(tensors: Any) -> float:
    return float(sum(float(t.float().pow(2).sum()) for t in tensors) ** 0.5)


def test_a_checkpoint_resumes_and_loads_on_two_ranks_as_saved(runs: Any) -> None:
    """A GRPO model released and registered again resumes its checkpoint, and a Tinker
    client loads a save back (weights and optimizer state): rank 0 reads the files and the
    other ranks receive them, so every rank holds the saved adapter exactly (the adapters
    compared above are the resumed and the loaded ones, on each rank count)."""
    _one, _two, alone, split = runs
    for figures in (alone, split):
        assert figures["grpo"]["resumed_max_diff"] == 0.0
        assert figures["tinker"]["loaded_max_diff"] == 0.0
