"""Network faults on the fleet across four hosts (network namespaces: Redis; trainer with
its inference server, and reward; two worker hosts, each a rollout worker and a local
sandbox replica; tests/support/netns_fleet.py). Runs a job undisturbed, then the same job
and seed while the driver (tests/support/partition.py) cuts worker hosts off past their
leases, kills every process of a worker host at once and boots it again, restarts Redis
(same AOF directory) and cuts the trainer host off during gather. Needs root and iproute2.

    PYTHONPATH=src:services/...:tests/support nice -n 10 python bench/partition_bench.py

Last lines: `partitions=` (links cut), `lost_trajectories=`, `duplicate_groups=`,
`late_results_ignored=` (a cut worker's publishes after the heal that did not count),
`orphan_sessions=` (sandbox sessions open a lease after the job),
`partition_recovery_s_max=` (cut off → its groups claimed elsewhere; target <= 60) and
`partition_step_time_ratio=` (mean step time with the faults / without).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from chaos import ChaosDriver, ChaosPlan
from chaos_fleet import leftover_workspaces, subreaper
from netns_fleet import NetnsFleet
from netns_hosts import can_make_namespaces
from partition import NET_KINDS, NetFaultDriver, NetReport


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--worker-cuts", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=3600.0)
    parser.add_argument("--workdir", default="")
    args = parser.parse_args()
    why_not = can_make_namespaces()
    if why_not:
        print(f"partition bench: {why_not}", file=sys.stderr)
        return 2
    counts = dict.fromkeys(NET_KINDS, 1) | {"worker_cut": args.worker_cuts}
    plan = ChaosPlan(seed=args.seed, steps=args.steps, counts={})
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="artfleet-partition-"))
    start = time.monotonic()

    def log(line: str) -> None:
        print(f"[{time.monotonic() - start:7.1f}s] {line}", flush=True)

    # One group per worker at a time: a step's groups go to both worker hosts.
    with subreaper():
        fleet = NetnsFleet(workdir, extra_env={"ARTFLEET_GROUPS_CONCURRENCY": "1"})
        fleet.start()
        try:
            quiet = ChaosDriver(fleet, plan, log)
            quiet.run(args.timeout_s)
            baseline = quiet.step_seconds()
            log(f"baseline step seconds: {baseline}")
            report = NetFaultDriver(fleet, plan, log, counts).run_and_verify(args.timeout_s)
            report.chaos.baseline_step_seconds = baseline
        finally:
            log(f"fleet stopped: {fleet.stop()}")
        report.chaos.orphans = fleet.leftover_processes() + fleet.net_leftovers
    report.chaos.orphan_workspaces = leftover_workspaces(fleet)
    log(f"logs in {workdir / 'logs'}")
    return _print(report)


def _print(report: NetReport) -> int:
    chaos = report.chaos
    for recovery in chaos.recoveries:
        print(f"recovery step={recovery.step} group={recovery.group} s={recovery.recovered_s}")
    for line in report.lines():
        print(line)
    ratio = chaos.step_time_ratio
    print(f"partition_step_time_ratio={'n/a' if ratio is None else f'{ratio:.2f}'}")
    ok = all(chaos.checks.values()) and not chaos.orphans and not chaos.missing_steps
    ok = ok and not chaos.orphan_workspaces and not chaos.lost_trajectories
    return 0 if ok and not chaos.duplicate_groups else 1


if __name__ == "__main__":
    sys.exit(main())
