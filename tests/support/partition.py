"""A network fault on the multi-host fleet (`netns_fleet`): a worker host cut off mid-step
(its port on the switch set down: its processes run on, nothing reaches them and they
reach nothing off their host) for longer than the group and sandbox leases, then healed.

The chaos driver (tests/support/chaos.py) runs the job and `verify` makes its checks; a
cut-off worker's runs count as a killed worker's do (its groups must run again elsewhere:
`Recovery`, `artfleet_trainer_groups_requeued_total`). What differs from a kill: the
worker lives on and, once healed, publishes its late results (which must not count) and
calls its sandbox sessions, which the replicas closed when its lease ran out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chaos import ChaosDriver, ChaosPlan, Recovery
from netns_fleet import WORKER_HOSTS, NetnsFleet

from artfleet.v1 import common_pb2 as pb

NOT_STORED = "(not stored)"  # the worker's log line for a publish that did not count


@dataclass
class Cut:
    host: str
    step: int
    at: float
    groups: dict[str, str]  # group id → the cut-off worker's claim token
    healed_at: float | None = None


class PartitionDriver(ChaosDriver):
    """`ChaosDriver` with no kills: cuts `host` off at `step` once its rollout worker has
    held a group for `delay_s`, and heals it `hold_s` later."""

    fleet: NetnsFleet

    def __init__(
        self,
        fleet: NetnsFleet,
        plan: ChaosPlan,
        log: Callable[[str], None],
        *,
        host: str = "worker2",
        step: int = 1,
        delay_s: float = 2.0,
        hold_s: float = 30.0,
    ) -> None:
        super().__init__(fleet, plan, log)
        self.host, self.step_to_cut, self.delay_s, self.hold_s = host, step, delay_s, hold_s
        self.cuts: list[Cut] = []

    def _inject(self, job: pb.Job) -> None:
        if job.state != pb.JOB_STATE_RUNNING:
            return
        now = time.monotonic()
        if not self.cuts and self.step >= self.step_to_cut:
            self._maybe_cut(now)
        for cut in self.cuts:
            if cut.healed_at is None and now - cut.at >= self.hold_s:
                self.fleet.hosts.heal(cut.host)
                cut.healed_at = time.monotonic()
                self.log(f"step {self.step}: {cut.host} healed after {now - cut.at:.0f}s")

    def _maybe_cut(self, now: float) -> None:
        rollout = WORKER_HOSTS[self.host][0]
        prefix = f"{rollout}:{self.fleet.pid(rollout)}:"
        held = {g: t for g, t in self._claims(self.step).items() if t.startswith(prefix)}
        if not held or self._claim_age(now) < self.delay_s:
            return  # mid-step: its episodes are running
        self.fleet.hosts.cut(self.host)
        at = time.monotonic()
        self.killed_tokens.update(held.values())  # their re-runs are expected, not spurious
        for group, token in held.items():
            self.recoveries.append(Recovery(self.step, group, token, at, self.trainer_epoch))
        self.cuts.append(Cut(self.host, self.step, at, held))
        self.log(f"step {self.step}: {self.host} cut off holding {sorted(held)}")

    def heal_all(self) -> None:
        """Heals what is still cut (a job that ended before its heal, a failed run)."""
        for cut in self.cuts:
            if cut.healed_at is None:
                self.fleet.hosts.heal(cut.host)
                cut.healed_at = time.monotonic()

    def sandbox_lost_bounds(self) -> tuple[int, float]:
        # Sessions across the cut (both ways) are lost when their owner's lease runs out;
        # how many depends on where the episodes were: any number is right here.
        return 0, float("inf")


def late_results_ignored(log_path: Path) -> int:
    """Publishes by one worker that did not count (the step closed, or a better answer
    was there), from its log."""
    return sum(NOT_STORED in line for line in log_path.read_text(errors="replace").splitlines())
