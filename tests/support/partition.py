"""Faults of a multi-host fleet (`netns_fleet`), each at a step and delay drawn from a seed
and fired by the chaos driver's machinery (one at a time, only while every process serves,
after the step's oldest run is `delay_s` old):
- worker_cut: the worker host holding a group cut off (its port on the switch set down: its
  processes run on, nothing reaches them and they reach nothing off their host) for longer
  than the group and sandbox leases, then healed.
- host_down: every process in the worker host holding a group SIGKILLed at once (all pids
  of its namespace, the sandbox's session commands and Celery's children included), then
  the host "reboots": its sandbox replica and rollout worker start again.
- redis_restart: the Redis host's redis-server stopped (SIGTERM) and started again on the
  same AOF data directory.
- trainer_cut: the trainer host (trainer, its inference server, reward) cut off while the
  trainer waits for the step's groups, for as long as a worker cut, then healed.

`verify` (tests/support/chaos.py) makes the checks; a cut-off or dead worker's runs count
as a killed worker's do (its groups must run again elsewhere: `Recovery`). What a cut adds:
the worker lives on and, once healed, publishes its late results (which must not count)
and calls its sandbox sessions, which the replicas closed when its lease ran out.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import KINDS, ChaosDriver, ChaosPlan, ChaosReport, Fault, Recovery, verify
from chaos_fleet import ROLLOUTS, wait_sessions_closed
from netns_fleet import PLACEMENT, WORKER_HOSTS, NetnsFleet

from artfleet.v1 import common_pb2 as pb

NET_KINDS = ("worker_cut", "host_down", "redis_restart", "trainer_cut")
NOT_STORED = "(not stored)"  # the worker's log line for a publish that did not count


def net_schedule(seed: int, steps: int, counts: dict[str, int]) -> list[Fault]:
    """The faults in an order and with delays drawn from `seed`, spread evenly over the
    steps (a fault left in the last step could find it gathered and never fire)."""
    rng = random.Random(seed)
    kinds = [kind for kind in NET_KINDS for _ in range(counts.get(kind, 0))]
    rng.shuffle(kinds)
    return [
        Fault(kind, 1 + i * steps // len(kinds), rng.uniform(0.5, 4.0))
        for i, kind in enumerate(kinds)
    ]


@dataclass
class Cut:
    host: str
    step: int
    at: float
    groups: dict[str, str]  # group id → the cut-off worker's claim token (none: trainer)
    hold_s: float
    healed_at: float | None = None


@dataclass
class NetReport:
    """The chaos report plus what only network faults have."""

    chaos: ChaosReport
    cuts: list[Cut]
    late_results_ignored: int
    partition_recovery_s: list[float] = field(default_factory=list)
    host_down_recovery_s: list[float] = field(default_factory=list)

    def lines(self) -> list[str]:
        worst = max(self.partition_recovery_s, default=0.0)
        down = max(self.host_down_recovery_s, default=0.0)
        return [
            *self.chaos.lines(),
            "cuts=" + ",".join(f"{c.host}@{c.step}:{sorted(c.groups)}" for c in self.cuts),
            f"partitions={len(self.cuts)}",
            f"late_results_ignored={self.late_results_ignored}",
            f"orphan_sessions={self.chaos.sessions_left}",
            f"partition_recovery_s_max={worst:.1f}",
            f"host_down_recovery_s_max={down:.1f}",
        ]


class NetFaultDriver(ChaosDriver):
    """`ChaosDriver` whose faults are `NET_KINDS` (`counts`); a cut heals `hold_s` after
    it began (default: the longer of the group and sandbox leases + 10 s)."""

    fleet: NetnsFleet

    def __init__(
        self,
        fleet: NetnsFleet,
        plan: ChaosPlan,
        log: Callable[[str], None],
        counts: dict[str, int],
        hold_s: float | None = None,
    ) -> None:
        super().__init__(fleet, plan, log)
        self.faults = net_schedule(plan.seed, plan.steps, counts)
        self.hold_s = hold_s or max(fleet.group_lease_s, fleet.sandbox_lease_s) + 10
        self.cuts: list[Cut] = []
        self.host_downs: list[tuple[str, float, dict[str, str]]] = []

    # ------------------------------------------------------------ the loop
    def _trainer_call(self, call: Callable[[Any], pb.Job]) -> pb.Job | None:
        if self.fleet.cut_off("trainer"):
            return None  # unreachable: not waiting for a connect to fail
        return super()._trainer_call(call)

    def _inject(self, job: pb.Job) -> None:
        now = time.monotonic()
        for cut in self.cuts:
            if cut.healed_at is None and now - cut.at >= cut.hold_s:
                self.fleet.hosts.heal(cut.host)
                cut.healed_at = time.monotonic()
                self.log(f"step {self.step}: {cut.host} healed after {now - cut.at:.0f}s")
        if not self.fleet.hosts.down:
            super()._inject(job)

    def _ready(self, fault: Fault, claim_age: float) -> bool:
        if fault.kind == "trainer_cut" and len(self._final(self.step)) >= self.plan.groups_per_step:
            return False  # gathered already: wait for the next step's gather
        return claim_age >= fault.delay_s

    def _holding_host(self) -> tuple[str, dict[str, str]] | None:
        """A worker host whose rollout worker holds groups of this step, and those."""
        claims = self._claims(self.step)
        for host, (rollout, _) in WORKER_HOSTS.items():
            prefix = f"{rollout}:{self.fleet.pid(rollout)}:"
            held = {g: t for g, t in claims.items() if t.startswith(prefix)}
            if held:
                return host, held
        return None

    def _lost(self, held: dict[str, str], at: float) -> None:
        self.killed_tokens.update(held.values())  # their re-runs are expected, not spurious
        for group, token in held.items():
            self.recoveries.append(Recovery(self.step, group, token, at, self.epoch))

    # ------------------------------------------------------------ faults
    def _cut(self, fault: Fault, host: str, held: dict[str, str]) -> None:
        self.fleet.hosts.cut(host)
        fault.fired_at = at = time.monotonic()
        self._lost(held, at)
        self.cuts.append(Cut(host, self.step, at, held, self.hold_s))
        fault.detail = f"{host} cut off for {self.hold_s:.0f}s holding {sorted(held)}"

    def _fire_worker_cut(self, fault: Fault) -> None:
        if found := self._holding_host():
            self._cut(fault, *found)

    def _fire_trainer_cut(self, fault: Fault) -> None:
        self._cut(fault, PLACEMENT["trainer"], {})
        self.epoch += 1  # its run is interrupted and restarts after the heal

    def _fire_redis_restart(self, fault: Fault) -> None:
        self._fire_redis(fault)

    def _fire_host_down(self, fault: Fault) -> None:
        found = self._holding_host()
        if found is None:
            return
        host, held = found
        names = list(WORKER_HOSTS[host])
        for name in names:
            self.fleet.bank(name)  # a dead /metrics is gone
        fault.fired_at = at = kill_namespace(self.fleet.hosts.namespace(host))
        for name in names:
            process = self.fleet.process(name)
            process.proc.wait(60)
            self.fleet.processes.remove(process)
        self._lost(held, at)
        self.host_downs.append((host, at, held))
        for name in reversed(names):  # the replica first: the worker dials it at start
            self.fleet.respawn(name)
        fault.detail = f"{host} down (every process SIGKILLed) holding {sorted(held)}; rebooted"

    def heal_all(self) -> None:
        """Heals what is still cut (a job that ended before its heal, a failed run)."""
        for cut in self.cuts:
            if cut.healed_at is None:
                self.fleet.hosts.heal(cut.host)
                cut.healed_at = time.monotonic()

    def injected(self) -> dict[str, int]:
        # The chaos kinds stay (verify's checks read them): none of them is fired here.
        fired = {k: sum(1 for f in self.faults if f.kind == k and f.fired_at) for k in NET_KINDS}
        return dict.fromkeys(KINDS, 0) | fired

    def sandbox_lost_bounds(self) -> tuple[int, float]:
        # Sessions across a cut (both ways) are lost when their owner's lease runs out, and
        # those on a dead host's replica at the next call: any number is right here.
        return 0, float("inf")

    def run_and_verify(self, timeout_s: float) -> NetReport:
        """Runs the job (every cut healed at the end, however it ended) and checks it;
        waits for every sandbox session to close (a lease after the last heal)."""
        try:
            job = self.run(timeout_s)
        finally:
            self.heal_all()
        report = verify(self, job, [])
        report.sessions_left = wait_sessions_closed(self.fleet, self.fleet.sandbox_lease_s + 30)
        report.checks["sessions_closed"] = report.sessions_left == 0
        late = sum(late_results_ignored(self.fleet.process(n).log_path) for n in ROLLOUTS)
        cut_tokens = {t for c in self.cuts for t in c.groups.values()}
        return NetReport(
            report,
            self.cuts,
            late,
            [r.recovered_s or 0.0 for r in self.recoveries if r.token in cut_tokens],
            [r.recovered_s or 0.0 for r in self.recoveries if r.token not in cut_tokens],
        )


def kill_namespace(namespace: str) -> float:
    """SIGKILLs every process in network namespace `namespace` until none is left (one
    forked meanwhile goes in the next round); returns when they are all gone."""
    while True:
        listed = subprocess.run(
            ["ip", "netns", "pids", namespace], capture_output=True, text=True, check=True
        ).stdout.split()
        # A zombie is dead already (its parent, or we as subreaper, reaps it).
        pids = [int(p) for p in listed if not _zombie(int(p))]
        if not pids:
            return time.monotonic()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)  # the kernel tears them down: look again


def _zombie(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in status


def late_results_ignored(log_path: Path | None) -> int:
    """Publishes by one worker that did not count (the step closed, or a better answer
    was there), from its log."""
    if log_path is None:
        return 0
    return sum(NOT_STORED in line for line in log_path.read_text(errors="replace").splitlines())
