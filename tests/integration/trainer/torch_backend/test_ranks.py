"""The torch backend on 2 ranks (torchrun, gloo on this CPU) against one process on the same
rows, on a tiny random Llama with SmolLM2's tokenizer and tied embeddings (the split's
arithmetic does not depend on the model's size; SmolLM2's full fine-tune took 8 GB and
two minutes here, bench/dist_step_bench.py runs it): a GRPO step, an SFT batch, a
Tinker-compatible forward_backward + optim_step and a full fine-tune's GRPO step
(tests/support/rank_steps.py) give the same figures and the same updated adapters (or
weights). A full fine-tune's checkpoint (its optimizer state sharded by DCP) resumes
exactly on its own number of ranks, and the 2 ranks' one trains on alike on 1 rank.

Tolerances: fp32 sums taken in another order (each rank sums its rows, then the ranks
sum), relative 1e-4 on the figures; the adapters' difference within 1e-3 of how far
training moved them (lora_B starts at 0, so its norm is that movement). Adam's first steps
move a weight by about the rate times its gradient's sign, which the order of a sum flips
for gradients near 0: an element-wise bound would measure that, not the split. A full
fine-tune's weights start at the base's, so the bound is on their difference from it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from api_fleet import tiny_model
from safetensors.torch import load_file

REPO = Path(__file__).resolve().parents[4]
SCRIPT = REPO / "tests" / "support" / "rank_steps.py"
TIMEOUT_S = 600  # a run takes about 12 s alone: room for a loaded 2-core machine
WORKS = ["grpo", "sft", "tinker", "full"]


def _run(out: Path, ranks: int, *args: str) -> dict[str, Any]:
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parent), *sys.path])}
    done = subprocess.run(
        [*launcher, str(SCRIPT), str(out), *args],
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
    module_tmp: Callable[[str], Path],
) -> Iterator[tuple[Path, Path, dict[str, Any], dict[str, Any]]]:
    one, two = module_tmp("one-rank"), module_tmp("two-ranks")
    base = tiny_model(module_tmp("base") / "model", tie_word_embeddings=True)
    works = ("--works", ",".join(WORKS), "--base", str(base))
    try:
        split = _run(two, 2, *works)
        # the one rank also resumes the 2 ranks' full fine-tune
        yield one, two, _run(one, 1, *works, "--resume-full", str(two)), split
    finally:  # checkpoints: not left for pytest's kept tmp dirs
        shutil.rmtree(one, ignore_errors=True)
        shutil.rmtree(two, ignore_errors=True)


@pytest.mark.parametrize("work", WORKS)
def test_two_ranks_train_as_one_on_the_same_rows(runs: Any, work: str) -> None:
    one, two, alone, split = runs
    for figure, value in alone[work].items():
        if figure == "seconds" or figure.endswith("_max_diff"):
            continue
        assert split[work][figure] == pytest.approx(value, rel=1e-4, abs=1e-6), (work, figure)
    before, after = torch.load(one / f"{work}.pt"), torch.load(two / f"{work}.pt")
    assert before.keys() == after.keys()
    if work == "full":
        base = load_file(one / "art/ranks/models/full/checkpoints/0000/model.safetensors")
        moved = _norm(v - base[k] for k, v in before.items() if k in base)
    else:
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


def test_a_full_fine_tunes_sharded_checkpoint_resumes_exactly_and_on_another_world(
    runs: Any,
) -> None:
    """Its weights come back exactly on 1 and on 2 ranks (each its own checkpoint); the 2
    ranks' checkpoint, its optimizer state resharded by DCP for 1 rank, trains the same
    next step there as on the 2 ranks (the step reads Adam's moments: a lost or misplaced
    shard would change it)."""
    one, two, alone, split = runs
    for figures in (alone, split):
        assert figures["full"]["resumed_max_diff"] == 0.0
    elsewhere = alone["full_elsewhere"]
    assert elsewhere["resumed_max_diff"] == 0.0
    for figure in ("resumed_step_loss", "resumed_step_grad_norm"):
        assert elsewhere[figure] == pytest.approx(split["full"][figure], rel=1e-4), figure
    # The checkpoint is a whole model folder; the optimizer state one shard a rank.
    step = one / "art" / "ranks" / "models" / "full" / "checkpoints" / "0001"
    assert (step / "config.json").is_file() and (step / "model.safetensors").is_file()
    assert (
        len(list((two / "art/ranks/models/full/checkpoints/0001/optimizer").glob("*.distcp"))) == 2
    )
    # Each of 2 ranks holds half of the full fine-tune's parameters.
    full_bytes = [int((two / f"full_param_bytes.{r}").read_text()) for r in (0, 1)]
    assert max(full_bytes) <= 0.55 * int((one / "full_param_bytes.0").read_text())
