"""The trainer on 2 CPU ranks against 1, on the same rows (torch_backend/ranks.py).

    python bench/dist_step_bench.py [--steps 3] [--threads 1] [--datums 4 --tokens 700]

Both runs are tests/support/rank_steps.py's Tinker-compatible work: a forward_backward on
`--datums` cross-entropy datums of `--tokens` tokens (4 of 700: two packed rows of 1,400
tokens, one a rank) and an optim_step, on SmolLM2-135M-Instruct in fp32, `--steps` times,
all but the first timed (the first also builds the allocator's pools and FSDP's lazy
state). Rows of this length make a step's compute large beside its communication, as a
real step's are; the learning guard's GRPO batch (rows of ~60 tokens) measured 1.40 (2
ranks slower than 1): per row, each layer's gather costs as much as its compute. The
2-rank run is torchrun with gloo on this machine.

- `dist_step_ratio_2=`: a step's seconds on 2 ranks / on 1 rank. Each rank gets
  `--threads` intra-op threads (default 1), so the 2 ranks use 2 cores against 1: the
  ideal is 0.5 plus communication (every decoder layer all-gathered for its forward and
  again for its backward, the adapter's gradients summed, the rows' figures gathered)
  and the weight-0 row a rank with fewer rows runs. Two ranks on a 2-core machine also
  share it with everything else running there.
- `per_rank_param_bytes_ratio_2=`: a full fine-tune's (`finetune: full`) parameter
  bytes rank 0 holds with 2 ranks / with 1, from a GRPO step of rank_steps.py's `full`
  work: every weight is sharded (full_model.py), so the ideal is 0.5; the target 0.55.
- `full_step_ratio_2=`: that full fine-tune's second GRPO step (the learning guard's batch),
  seconds on 2 ranks / on 1 (short rows: the gathers weigh as in the LoRA figure above).
- `per_rank_param_bytes_ratio_2_lora=`: the shared LoRA base's bytes, the same ratio. The
  decoder (embeddings, layers, final norm) is sharded; the output head stays whole on every
  rank (the loss reads its weight outside any forward), a copy of its own when tied to the
  embeddings, as SmolLM2's is: for this model, whose head is a fifth of its parameters,
  the ratio is about 0.7; for Qwen3-32B about 0.51.
Also printed: each run's step seconds and both ranks' bytes. Not run by pytest (the
equivalence of the two is: tests/integration/trainer/torch_backend/test_ranks.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "support" / "rank_steps.py"


def run(
    out: Path, ranks: int, args: argparse.Namespace, work: str = "tinker"
) -> tuple[float, list[int]]:
    """One run of `work` (tinker, or full: a full fine-tune's GRPO steps): its mean timed
    step's seconds and each rank's parameter bytes."""
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SCRIPT.parent), *sys.path])}
    options = {
        "--works": work,
        "--steps": args.steps if work == "tinker" else 2,
        "--threads": args.threads,
        "--tinker-datums": args.datums,
        "--tinker-tokens": args.tokens,
    }
    argv = [str(out), *(str(v) for pair in options.items() for v in pair)]
    done = subprocess.run(
        [*launcher, str(SCRIPT), *argv], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{ranks} rank(s) failed:\n{done.stderr[-4000:]}")
    figures = json.loads((out / "figures.json").read_text())[work]
    steps = args.steps if work == "tinker" else 2
    timed = [figures[f"seconds_{step}"] for step in range(1, steps)]
    held_file = "param_bytes" if work == "tinker" else "full_param_bytes"
    held = [int((out / f"{held_file}.{rank}").read_text()) for rank in range(ranks)]
    return sum(timed) / len(timed), held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps (the first untimed)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument("--datums", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=700)
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the first step is not timed)")
    with tempfile.TemporaryDirectory(prefix="dist-step-") as work:
        one_s, one_bytes = run(Path(work) / "one", 1, args)
        two_s, two_bytes = run(Path(work) / "two", 2, args)
        full_one_s, full_one_bytes = run(Path(work) / "full-one", 1, args, "full")
        full_two_s, full_two_bytes = run(Path(work) / "full-two", 2, args, "full")
    print(f"step_seconds_1_rank={one_s:.3f}")
    print(f"step_seconds_2_ranks={two_s:.3f}")
    print(f"param_bytes_1_rank={one_bytes[0]}")
    print(f"param_bytes_2_ranks={','.join(str(b) for b in two_bytes)}")
    print(f"full_param_bytes_1_rank={full_one_bytes[0]}")
    print(f"full_param_bytes_2_ranks={','.join(str(b) for b in full_two_bytes)}")
    print(f"dist_step_ratio_2={two_s / one_s:.3f}")
    print(f"per_rank_param_bytes_ratio_2={full_two_bytes[0] / full_one_bytes[0]:.3f}")
    print(f"full_step_ratio_2={full_two_s / full_one_s:.3f}")
    print(f"per_rank_param_bytes_ratio_2_lora={two_bytes[0] / one_bytes[0]:.3f}")


if __name__ == "__main__":
    main()
