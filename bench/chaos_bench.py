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

`--inference N` runs the inference outages instead (tests/support/inference_outage.py), on
a local fleet with the vLLM engine, N times each: the whole fleet stopped mid-job and
started again with the inference service 90 s late (after a restart vLLM answers long after
the trainer resumed the job), and the inference process group SIGKILLed mid-step and started
again 30 s late. Prints `inference_restart_ok=`, `inference_kill_ok=` (runs that succeeded
with every trajectory, of N), `lost_trajectories=`, `duplicate_steps=` and
`inference_outage_recovery_s=` (max, from the inference serving again to the step moving: a
group of the interrupted step answered, or the step done; target <= 30).
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
    parser.add_argument("--inference", type=int, default=0, metavar="N")
    parser.add_argument("--hold-s", type=float, default=90.0)
    args = parser.parse_args()
    if args.inference:
        return inference_outages(args.inference, args.hold_s, args.workdir)
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


def inference_outages(runs: int, hold_s: float, workdir: str) -> int:
    from inference_outage import kill_mid_step, new_fleet, restart_mid_job

    root = Path(workdir or tempfile.mkdtemp(prefix="artfleet-outage-"))
    start = time.monotonic()

    def log(line: str) -> None:
        print(f"[{time.monotonic() - start:7.1f}s] {line}", flush=True)

    results = []
    for i in range(runs):
        for case in ("restart", "kill"):
            fleet = new_fleet(root / f"{case}-{i}")
            fleet.start(timeout_s=900)
            try:
                if case == "restart":
                    run, fleet = restart_mid_job(fleet, hold_s, log)
                else:
                    run = kill_mid_step(fleet, hold_s=30)
            finally:
                fleet.stop()
            log(
                f"{case} {i + 1}/{runs}: {pb_state(run.job.state)} steps="
                f"{[s.trajectories for s in run.job.steps]} recovery_s={run.recovery_s} "
                f"error={run.job.error!r}"
            )
            results.append(run)
    for case in ("restart", "kill"):
        ok = sum(1 for run in results if run.case == case and run.ok)
        print(f"inference_{case}_ok={ok}/{runs}")
    print(f"lost_trajectories={sum(run.lost_trajectories for run in results)}")
    print(f"duplicate_steps={sum(run.duplicate_steps for run in results)}")
    recoveries = [run.recovery_s for run in results if run.recovery_s is not None]
    print(f"inference_outage_recovery_s={max(recoveries):.1f}" if recoveries else "none")
    log(f"logs in {root}")
    return 0 if all(run.ok for run in results) else 1


def pb_state(state: int) -> str:
    from artfleet.v1 import common_pb2 as pb

    return pb.JobState.Name(state)


if __name__ == "__main__":
    sys.exit(main())
