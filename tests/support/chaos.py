"""The chaos driver: a real job through a `ChaosFleet` while faults chosen from a seed hit
it, then the checks. Shared by `bench/chaos_bench.py` (the full run) and
`tests/integration/fleet/test_chaos.py` (a CI-sized plan).

Faults, each at a step the seed picks (one not fired by then waits for a later step), after
a seeded delay from the moment its condition held:
- worker: SIGKILL of the rollout worker holding a claimed group (the claim token names the
  worker and its pid); the group must run again elsewhere (`recovery_s`).
- sandbox: SIGKILL of the sandbox replica where live workers hold the most sessions
  (episodes mid-way); each such session is counted lost at its episode's next call.
- reward: the reward service is frozen (SIGSTOP) while groups run, until a worker's
  episodes finished (its ScoreGroup is then in flight), then SIGKILLed: mid-score.
- redis: a graceful redis-server restart (AOF on), as `compose restart` does.
- trainer_gather / trainer_train: SIGKILL of the trainer while it waits for the step's
  groups / while `artfleet_trainer_training` is 1.
Each killed process is started again at once with its command and ports (compose's
restart policy). One fault at a time, each only when every process serves.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc
import redis
from chaos_fleet import (
    NAMES,
    ROLLOUTS,
    SANDBOXES,
    ChaosFleet,
    docker_containers,
    leftover_workspaces,
    session_count,
    subreaper,
    wait_sessions_closed,
)

from artfleet.contracts.batches import StepKeys
from artfleet.runtime.rpc.client import sync_channel
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import batch_pb2, trainer_pb2, trainer_pb2_grpc
from artfleet.v1 import common_pb2 as pb

KINDS = ("worker", "sandbox", "reward", "redis", "trainer_gather", "trainer_train")
TERMINAL = (pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED)
POLL_S = 0.25
REFRESH_EVERY = 8  # polls between scrapes of every process (a crash loses only that much)
MAX_CRASHES = 3  # per process name: more is a crash loop, not a fault's aftermath
REQUEUED = "artfleet_trainer_groups_requeued_total"
RESUMES = "artfleet_trainer_job_resumes_total"
INTERRUPTIONS = "artfleet_trainer_job_interruptions_total"
STEPS_TRAINED = "artfleet_trainer_steps_trained_total"
SANDBOX_LOST = 'artfleet_rollout_failures_total{kind="sandbox_lost"}'
HELD = 'artfleet_rollout_sandbox_sessions{{replica="{target}"}}'
REWARD_RETRIES = 'artfleet_rollout_failures_total{kind="reward_unavailable"}'


@dataclass(frozen=True)
class ChaosPlan:
    seed: int
    steps: int = 3
    groups_per_step: int = 2
    rollouts_per_group: int = 2
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 1))

    def job_fields(self) -> dict[str, Any]:
        # min_group_fraction 1: the trainer never trains on a quorum, so a lost group shows.
        return dict(
            name=f"chaos-{self.seed}",
            steps=self.steps,
            groups_per_step=self.groups_per_step,
            rollouts_per_group=self.rollouts_per_group,
            max_turns=2,
            max_tokens=32,
            seed=self.seed,
            lora_rank=4,
            learning_rate=1e-3,
            gather_timeout_s=3600.0,
            min_group_fraction=1.0,
        )


@dataclass
class Fault:
    kind: str
    step: int
    delay_s: float
    fired_at: float | None = None
    detail: str = ""


def schedule(plan: ChaosPlan) -> list[Fault]:
    rng = random.Random(plan.seed)
    faults = [
        Fault(kind, rng.randint(1, plan.steps), rng.uniform(0.5, 4.0))
        for kind in KINDS
        for _ in range(plan.counts.get(kind, 0))
    ]
    return sorted(faults, key=lambda f: (f.step, KINDS.index(f.kind) != 0, rng.random()))


@dataclass
class Recovery:
    """A group a killed worker held: when it died, and when the group ran again."""

    step: int
    group: str
    token: str
    killed_at: float
    epoch: int  # the driver's count of run restarts when the worker died
    recovered_s: float | None = None
    across_restart: bool = False  # ran again after a restart: dispatched by it, not requeued


@dataclass
class ChaosReport:
    plan: ChaosPlan
    job_state: str
    injected: dict[str, int]
    lost_trajectories: int
    dropped_by_policy: int
    duplicate_groups: int
    duplicate_steps: int
    missing_steps: list[int]
    orphans: list[str]
    orphan_workspaces: list[str]
    recoveries: list[Recovery]
    step_seconds: list[float]
    counters: dict[str, float]
    checks: dict[str, bool]
    baseline_step_seconds: list[float] = field(default_factory=list)
    crashes: dict[str, int] = field(default_factory=dict)
    sessions_left: int = 0  # sandbox sessions still open a lease after the job

    @property
    def kills(self) -> int:
        return sum(n for kind, n in self.injected.items() if kind != "redis")

    @property
    def recovery_s_max(self) -> float:
        return max((r.recovered_s or 0.0 for r in self.recoveries), default=0.0)

    @property
    def step_time_ratio(self) -> float | None:
        if not self.baseline_step_seconds or not self.step_seconds:
            return None
        return statistics.mean(self.step_seconds) / statistics.mean(self.baseline_step_seconds)

    def lines(self) -> list[str]:
        ratio = self.step_time_ratio
        unrecovered = sum(1 for r in self.recoveries if r.recovered_s is None)
        return [
            f"job_state={self.job_state}",
            "injected=" + ",".join(f"{k}:{n}" for k, n in self.injected.items()),
            "counters=" + ",".join(f"{k}:{v:g}" for k, v in self.counters.items()),
            "checks=" + ",".join(f"{k}:{'ok' if v else 'FAILED'}" for k, v in self.checks.items()),
            f"groups_lost_to_kills={len(self.recoveries)} unrecovered={unrecovered}",
            f"dropped_by_policy={self.dropped_by_policy}",
            "crashes=" + (",".join(f"{k}:{n}" for k, n in self.crashes.items()) or "none"),
            f"orphan_workspaces={len(self.orphan_workspaces)}",
            f"sessions_left={self.sessions_left}",
            "step_seconds=" + ",".join(f"{s:.1f}" for s in self.step_seconds),
            "baseline_step_seconds=" + ",".join(f"{s:.1f}" for s in self.baseline_step_seconds),
            f"kills={self.kills}",
            f"lost_trajectories={self.lost_trajectories}",
            f"duplicate_groups={self.duplicate_groups}",
            f"duplicate_steps={self.duplicate_steps}",
            f"orphan_containers={len(self.orphans)}",
            f"recovery_s_max={self.recovery_s_max:.1f}",
            f"step_time_ratio={'n/a' if ratio is None else f'{ratio:.2f}'}",
            *(f"orphan: {name}" for name in self.orphans),
        ]


class ChaosDriver:
    """Runs one job on `fleet` and injects `plan`'s faults; `run` returns the job id."""

    def __init__(self, fleet: ChaosFleet, plan: ChaosPlan, log: Callable[[str], None]) -> None:
        self.fleet = fleet
        self.plan = plan
        self.faults = schedule(plan)
        self.log = log
        # Typed loosely: redis-py's sync and async return types are one union.
        self.redis: Any = redis.Redis.from_url(fleet.redis_url, socket_timeout=5)
        self.recoveries: list[Recovery] = []
        self.seen: dict[tuple[int, str], dict[str, float]] = {}
        self.killed_tokens: set[str] = set()
        self.spurious_requeues = 0
        # Faults after which the trainer restarts its run (its kill, a Redis restart, a cut
        # of its host): StepBatches.restart then dispatches a dead worker's group itself.
        self.epoch = 0
        self.step = 1
        self.job_id = ""
        self._frozen: tuple[float, dict[str, float]] | None = None
        self.sandbox_sessions_killed = 0  # on killed replicas: the most that can be lost
        # (worker, its pid, sessions it held on a replica when that replica was killed)
        self.sandbox_sessions_held: list[tuple[str, int, int]] = []
        self.reward_kills_in_flight = 0
        self.crashes: dict[str, int] = {}
        # The fleet may have run a job before (the baseline): only this job's counts count.
        self.counters_at_start = read_counters(fleet)

    # ------------------------------------------------------------ the job
    def run(self, timeout_s: float) -> pb.Job:
        spec = JobSpecModel.model_validate(self.plan.job_fields())
        job = self._trainer_call(
            lambda stub: stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
        )
        assert job is not None
        self.job_id = job.id
        self.log(f"job {job.id}: {len(self.faults)} faults planned")
        deadline = time.monotonic() + timeout_s
        polls = 0
        while job.state not in TERMINAL:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job.id} not done after {timeout_s:.0f}s")
            self._check_processes()
            latest = self._trainer_call(
                lambda stub: stub.GetJob(trainer_pb2.GetJobRequest(job_id=self.job_id))
            )
            job = latest or job
            if latest is not None:
                self.step = min(job.completed_steps + 1, self.plan.steps)
            self._observe()
            self._inject(job)
            polls += 1
            if polls % REFRESH_EVERY == 0:
                self.fleet.refresh()
            time.sleep(POLL_S)
        return job

    def _trainer_call(self, call: Callable[[Any], pb.Job]) -> pb.Job | None:
        if not self.fleet.alive("trainer"):
            return None
        channel = sync_channel(self.fleet.trainer_target, self.fleet.token)
        try:
            return call(trainer_pb2_grpc.TrainerStub(channel))
        except grpc.RpcError:
            return None  # restarting
        finally:
            channel.close()

    def _check_processes(self) -> None:
        """A process that exited by itself is started again (compose's `unless-stopped`)
        and counted; one that keeps crashing fails the run with its log."""
        for name in ("redis", *NAMES):
            if self.fleet.alive(name) or (name == "reward" and self._frozen):
                continue
            process = self.fleet.process(name)
            self.crashes[name] = self.crashes.get(name, 0) + 1
            if self.crashes[name] > MAX_CRASHES:
                self.fleet._check_alive(process)
            code = process.proc.returncode
            self.log(f"step {self.step}: {name} exited by itself ({code}); restarting it")
            if name != "redis":
                self.fleet.bank(name, crashed=True)
            self.fleet.processes.remove(process)
            self.fleet.respawn(name)

    # ------------------------------------------------------------ what we see
    def _claims(self, step: int) -> dict[str, str]:
        try:
            raw = self.redis.hgetall(StepKeys(self.job_id, step).claims)
        except redis.RedisError:
            return {}
        return {k.decode(): v.decode() for k, v in raw.items()}

    def _final(self, step: int) -> set[str]:
        try:
            raw = self.redis.hgetall(StepKeys(self.job_id, step).status)
        except redis.RedisError:
            return set()
        return {k.decode() for k, v in raw.items() if int(v) >= batch_pb2.GROUP_STATE_SCORED}

    def _observe(self) -> None:
        now = time.monotonic()
        claims = self._claims(self.step)
        for group, token in claims.items():
            tokens = self.seen.setdefault((self.step, group), {})
            if token in tokens:
                continue
            previous = list(tokens)
            tokens[token] = now
            if previous and previous[-1] not in self.killed_tokens:
                self.spurious_requeues += 1  # run again while its worker lived
            self._recovered(self.step, group, now)
        for group in self._final(self.step):
            self._recovered(self.step, group, now)
        for recovery in self.recoveries:  # a later step started: its groups all ran
            if recovery.step < self.step:
                self._recovered(recovery.step, recovery.group, now)

    def _recovered(self, step: int, group: str, now: float) -> None:
        for r in self.recoveries:
            if r.step == step and r.group == group and r.recovered_s is None:
                r.recovered_s = now - r.killed_at
                r.across_restart = r.epoch != self.epoch

    def _claim_age(self, now: float) -> float:
        """Age of the oldest run in progress at this step (-1 when none runs)."""
        ages = [
            now - self.seen.get((self.step, group), {}).get(token, now)
            for group, token in self._claims(self.step).items()
        ]
        return max(ages, default=-1.0)

    # ------------------------------------------------------------ faults
    def _inject(self, job: pb.Job) -> None:
        if job.state != pb.JOB_STATE_RUNNING:
            return
        if self._frozen is not None:
            self._reward_mid_score()
            return
        due = [f for f in self.faults if f.fired_at is None and f.step <= self.step]
        age = self._claim_age(time.monotonic()) if due else -1.0
        fault = next((f for f in due if self._ready(f, age)), None)
        if fault is None or not all(self.fleet.serving(n) for n in NAMES):
            return
        getattr(self, f"_fire_{fault.kind}")(fault)
        if fault.fired_at is not None:
            self.log(f"step {self.step}: {fault.kind} {fault.detail}")

    def _ready(self, fault: Fault, claim_age: float) -> bool:
        if fault.kind == "trainer_train":
            return self.fleet.scrape("trainer").get("artfleet_trainer_training", 0.0) >= 1.0
        return claim_age >= fault.delay_s

    def _fire_worker(self, fault: Fault) -> None:
        claims = self._claims(self.step)
        for name in ROLLOUTS:
            prefix = f"{name}:{self.fleet.pid(name)}:"
            held = {g: t for g, t in claims.items() if t.startswith(prefix)}
            if held:
                break
        else:
            return
        killed_at = self.fleet.kill(name)
        self.fleet.respawn(name)
        self.killed_tokens.update(held.values())
        for group, token in held.items():
            self.recoveries.append(Recovery(self.step, group, token, killed_at, self.epoch))
        fault.fired_at, fault.detail = killed_at, f"{name} holding {sorted(held)}"

    def _held(self, name: str) -> dict[str, int]:
        """Sessions each live worker holds on sandbox replica `name` (its own gauge)."""
        key = HELD.format(target=self.fleet.target(name))
        return {w: int(self.fleet.scrape(w).get(key, 0.0)) for w in ROLLOUTS}

    def _fire_sandbox(self, fault: Fault) -> None:
        # Sessions of live workers' episodes (a killed worker's are closed within a lease).
        held = {n: self._held(n) for n in SANDBOXES}
        name = max(held, key=lambda n: sum(held[n].values()))
        if not sum(held[name].values()):
            return  # between episodes: wait for open sessions
        pids = {w: self.fleet.pid(w) for w in ROLLOUTS}
        sessions = session_count(self.fleet, name)
        fault.fired_at = self.fleet.kill(name)
        # Still held after the kill too (one closed in between was not lost).
        after = self._held(name)
        self.fleet.respawn(name)
        self.sandbox_sessions_killed += sessions
        for worker, n in held[name].items():
            self.sandbox_sessions_held.append((worker, pids[worker], min(n, after[worker])))
        fault.detail = f"{name} with {sessions} session(s), held by live workers: {held[name]}"

    def sandbox_lost_bounds(self) -> tuple[int, float]:
        """What `sandbox_lost` must be: at least the sessions on killed replicas held by
        workers that lived on to the end (each counts at its episode's next call, close at
        the latest), at most every session on them (unbounded if a replica also crashed)."""
        low = sum(
            n for worker, pid, n in self.sandbox_sessions_held if self.fleet.pid(worker) == pid
        )
        crashed = any(self.crashes.get(n) for n in SANDBOXES)
        return low, float("inf") if crashed else float(self.sandbox_sessions_killed)

    def _fire_reward(self, fault: Fault) -> None:
        self.fleet.bank("reward")
        self.fleet.freeze("reward")
        self._frozen = (time.monotonic(), self._episodes())
        fault.fired_at, fault.detail = time.monotonic(), "frozen until a ScoreGroup is in flight"

    def _episodes(self) -> dict[str, float]:
        return {
            name: sum(
                v for k, v in self.fleet.scrape(name).items() if k.startswith("artfleet_rollout_ep")
            )
            for name in ROLLOUTS
        }

    def _reward_mid_score(self) -> None:
        assert self._frozen is not None
        since, before = self._frozen
        now = self._episodes()
        # A group's episodes ended and its ScoreGroup waits, unread, at the frozen service
        # (episodes alone may be one of each of two groups, or a call not yet sent).
        scoring = (
            any(now[n] - before[n] >= self.plan.rollouts_per_group for n in ROLLOUTS)
            and self.fleet.unread_request_bytes("reward") > 0
        )
        if not scoring and time.monotonic() - since < 300:
            return
        self.fleet.kill("reward", bank=False)
        self.fleet.respawn("reward")
        self._frozen = None
        self.reward_kills_in_flight += int(scoring)
        self.log(f"step {self.step}: reward killed ({'mid-score' if scoring else 'timed out'})")

    def _fire_redis(self, fault: Fault) -> None:
        self.fleet.restart_redis()
        self.epoch += 1
        fault.fired_at, fault.detail = time.monotonic(), "restarted (SIGTERM, AOF)"

    def _fire_trainer_gather(self, fault: Fault) -> None:
        if len(self._final(self.step)) >= self.plan.groups_per_step:
            return  # gathered already: wait for the next step
        self._kill_trainer(fault, "during gather")

    def _fire_trainer_train(self, fault: Fault) -> None:
        self._kill_trainer(fault, "during train")

    def _kill_trainer(self, fault: Fault, when: str) -> None:
        fault.fired_at = self.fleet.kill("trainer")
        self.fleet.respawn("trainer")
        self.epoch += 1
        fault.detail = when

    # ------------------------------------------------------------ afterwards
    def injected(self) -> dict[str, int]:
        return {k: sum(1 for f in self.faults if f.kind == k and f.fired_at) for k in KINDS}

    def ledger(self) -> list[dict[str, Any]]:
        raws = self.redis.lrange(f"artfleet:job:{self.job_id}:trained", 0, -1)
        return [json.loads(raw) for raw in raws]

    def step_seconds(self) -> list[float]:
        """Per step: from its first STEP_STARTED to its STEP_DONE (restarts included)."""
        started: dict[int, float] = {}
        done: dict[int, float] = {}
        for _, fields in self.redis.xrange(f"artfleet:events:{self.job_id}"):
            event = pb.ProgressEvent.FromString(fields[b"e"])
            at = event.time.ToNanoseconds() / 1e9
            if event.kind == pb.EVENT_KIND_STEP_STARTED:
                started.setdefault(event.step, at)
            elif event.kind == pb.EVENT_KIND_STEP_DONE:
                done[event.step] = at
        return [done[s] - started[s] for s in sorted(done) if s in started]


COUNTERS = {
    "requeued": ("trainer", REQUEUED),
    "resumes": ("trainer", RESUMES),
    "interruptions": ("trainer", INTERRUPTIONS),
    "steps_trained": ("trainer", STEPS_TRAINED),
    "sandbox_lost": ("rollout", SANDBOX_LOST),
    "reward_retries": ("rollout", REWARD_RETRIES),
}


def read_counters(fleet: ChaosFleet) -> dict[str, float]:
    """The failure counters, summed over every incarnation of their processes."""
    return {name: fleet.counter(kind, key) for name, (kind, key) in COUNTERS.items()}


def verify(driver: ChaosDriver, job: pb.Job, orphans: list[str]) -> ChaosReport:
    """Everything the suite asserts, from the job store, the ledger and /metrics."""
    plan, fleet = driver.plan, driver.fleet
    ledger = driver.ledger()
    counts = {s: sum(1 for e in ledger if e["step"] == s) for s in range(1, plan.steps + 1)}
    last = {e["step"]: e for e in ledger}
    per_step = plan.groups_per_step * plan.rollouts_per_group
    dropped = sum(e["dropped"] for e in last.values())
    lost = sum(per_step - e["trajectories"] - e["dropped"] for e in last.values())
    lost += per_step * sum(1 for s in counts if s not in last)
    counters = {k: v - driver.counters_at_start[k] for k, v in read_counters(fleet).items()}
    injected = driver.injected()
    return ChaosReport(
        plan=plan,
        job_state=pb.JobState.Name(job.state),
        injected=injected,
        lost_trajectories=lost,
        dropped_by_policy=dropped,
        duplicate_groups=sum(len(e["groups"]) - len(set(e["groups"])) for e in ledger),
        duplicate_steps=sum(max(0, n - 1) for n in counts.values()),
        missing_steps=[s for s, n in counts.items() if n == 0],
        orphans=orphans,
        orphan_workspaces=[],  # counted after the fleet stopped (run_chaos)
        recoveries=driver.recoveries,
        step_seconds=driver.step_seconds(),
        counters=counters,
        checks=metric_checks(driver, job, counters, injected),
        crashes=dict(driver.crashes),
    )


def metric_checks(
    driver: ChaosDriver, job: pb.Job, counters: dict[str, float], injected: dict[str, int]
) -> dict[str, bool]:
    """The failure counters on /metrics against what was injected."""
    held = len(driver.recoveries)
    across = sum(1 for r in driver.recoveries if r.across_restart)
    # A trainer that died by itself (the kernel's OOM killer on a loaded machine) and was
    # restarted by the driver resumes its job as a planned kill does.
    trainer_kills = injected["trainer_gather"] + injected["trainer_train"]
    trainer_kills += driver.crashes.get("trainer", 0)
    low_lost, high_lost = driver.sandbox_lost_bounds()
    return {
        "succeeded": job.state == pb.JOB_STATE_SUCCEEDED,
        "summaries": [s.step for s in job.steps] == list(range(1, driver.plan.steps + 1)),
        # A group pending when its run restarted (a trainer kill, a Redis restart: any
        # number of groups each) was dispatched by the restart, not requeued; one
        # interruption may also land just after a later kill, before the driver sees it.
        "requeued": held - across - counters["interruptions"]
        <= counters["requeued"]
        <= held + driver.spurious_requeues,
        "resumes": counters["resumes"] == trainer_kills + counters["interruptions"],
        "steps_trained": counters["steps_trained"] == driver.plan.steps,
        "sandbox_lost": low_lost <= counters["sandbox_lost"] <= high_lost,
        "reward_retries": counters["reward_retries"] >= driver.reward_kills_in_flight,
    }


def orphans_after_stop(fleet: ChaosFleet) -> list[str]:
    """After `fleet.stop()`: processes of the deployment still alive, and its containers."""
    return fleet.leftover_processes() + docker_containers(fleet.deployment)


def run_chaos(
    workdir: Path,
    plan: ChaosPlan,
    *,
    baseline: bool,
    timeout_s: float,
    log: Callable[[str], None] = print,
) -> ChaosReport:
    """A fresh fleet; the undisturbed job first when `baseline` (same spec and seed), then
    the job under `plan`; the fleet stopped; every check. The fleet's Python must see our
    sources (PYTHONPATH) as the caller does."""
    with subreaper():
        fleet = ChaosFleet(workdir)
        fleet.start()
        try:
            report = _run_plan(fleet, plan, baseline, timeout_s, log)
        finally:
            log(f"fleet stopped: {fleet.stop()}")
        report.orphans = orphans_after_stop(fleet)
    report.orphan_workspaces = leftover_workspaces(fleet)
    return report


def _run_plan(
    fleet: ChaosFleet,
    plan: ChaosPlan,
    baseline: bool,
    timeout_s: float,
    log: Callable[[str], None],
) -> ChaosReport:
    baseline_seconds: list[float] = []
    if baseline:
        quiet = ChaosDriver(fleet, replace(plan, counts={}), log)
        quiet.run(timeout_s)
        baseline_seconds = quiet.step_seconds()
        log(f"baseline step seconds: {baseline_seconds}")
    driver = ChaosDriver(fleet, plan, log)
    job = driver.run(timeout_s)
    report = verify(driver, job, [])  # counters and the ledger need the fleet up
    report.baseline_step_seconds = baseline_seconds
    # Every episode closed its session; a killed worker's went with its owner lease.
    report.sessions_left = wait_sessions_closed(fleet, fleet.sandbox_lease_s + 30)
    report.checks["sessions_closed"] = report.sessions_left == 0
    return report
