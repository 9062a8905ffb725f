"""The chaos suite, full size: a real local fleet (torch backend, SmolLM2, 2 rollout
workers, 2 local sandbox replicas, reward, Redis with AOF) runs a 3-step job undisturbed,
then the same job and seed while the driver SIGKILLs rollout workers (20 times), a sandbox
replica mid-episode, the reward service mid-score and the trainer during gather and during
train, and restarts Redis. Driver and checks: tests/support/chaos.py.

Group lease: the driver sets ARTFLEET_GROUP_LEASE_S=10 (default 30) and the trainer's
ARTFLEET_JOB_LEASE_S=6, so a death is noticed sooner; recovery is about a lease plus one
trainer wake (5 s). A killed worker's sandbox sessions close within
ARTFLEET_SANDBOX_LEASE_S=15 (default 60).

    PYTHONPATH=src:services/...:tests/support nice -n 10 python bench/chaos_bench.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from chaos import KINDS, ChaosPlan, run_chaos


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--worker-kills", type=int, default=20)
    parser.add_argument("--timeout-s", type=float, default=5400.0)
    parser.add_argument("--workdir", default="")
    args = parser.parse_args()
    counts = dict.fromkeys(KINDS, 1) | {"worker": args.worker_kills}
    plan = ChaosPlan(seed=args.seed, steps=args.steps, counts=counts)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="artfleet-chaos-"))
    start = time.monotonic()

    def log(line: str) -> None:
        print(f"[{time.monotonic() - start:7.1f}s] {line}", flush=True)

    report = run_chaos(workdir, plan, baseline=True, timeout_s=args.timeout_s, log=log)
    log(f"logs in {workdir / 'logs'}")
    for recovery in report.recoveries:
        print(f"recovery step={recovery.step} group={recovery.group} s={recovery.recovered_s}")
    for line in report.lines():
        print(line)
    ok = all(report.checks.values()) and not report.orphans and not report.missing_steps
    ok = ok and not report.orphan_workspaces
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
