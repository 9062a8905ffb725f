"""The platform's own cost per turn: a real job on a real local fleet (redis-server, Celery
rollout workers, sandbox with the local backend, reward, trainer with the torch backend)
whose policy is the replay server (bench/replay_policy.py), which answers at once.

    python bench/overhead_bench.py [--groups 8] [--rollouts 4] [--steps 2]

What runs is the product's whole path: SubmitJob, the trainer's dispatch through Celery,
the tool agent (`tool-shell`: bash calls in sandbox sessions, then submit), the check,
Reward.ScoreGroup, the step batch in Redis, the trainer's gather and a real training step
(SmolLM2 on the made-up tokens). The same job runs with one rollout worker process, then
with a second one started beside it.

Figures:
- per-turn overhead: from the replay server's answer leaving to the same episode's next
  request arriving (the sandbox exec, the agent's bookkeeping, both HTTP legs): a turn's
  wall time minus the policy's own time. The headline p50/p95 come from a job that runs
  one episode at a time (`max_concurrent: 1`): the cost of a turn, not of a queue; the
  1-worker job's figure (every episode at once) is printed as `..._loaded`.
- fleet turns/s: policy turns served ÷ the steps' rollout seconds (dispatch to gathered).
- trainer gather CPU per group: the trainer's `artfleet_trainer_gather_cpu_seconds_total`
  ÷ `artfleet_trainer_gathered_groups_total` over the job (its process CPU from dispatch
  until the groups are decoded; no generation here, the policy is external).
- Redis commands per group: `INFO commandstats` calls before/after the job ÷ groups, with
  the commands that dominate (Celery's broker traffic included).
- where a turn's time goes: the services' own histograms (rollout model/sandbox seconds,
  sandbox exec and create seconds, reward scoring seconds), as deltas over the job.

The machine is shared: each measurement prints `uptime` with it.

- the per-stage breakdown of the headline job's turn (`stages`): medians of the
  services' own histograms (the policy request's build, the policy call and a sandbox
  exec as the worker sees them, the exec inside the sandbox), the replay policy's own
  time, and the parts between them (HTTP legs, the exec's gRPC hop, the agent's
  bookkeeping) as differences of medians.

Last lines: `redis_calls_per_group=`, `redis_calls_per_turn=`,
`overhead_stage_<stage>_ms_p50=` (the breakdown), `overhead_ms_per_turn_p50=`,
`overhead_ms_per_turn_p95=` (target p50 <= 10), `fleet_turns_per_s_1w=`,
`fleet_turns_per_s_2w=`, `trainer_gather_cpu_s_per_group=`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import redis
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_policy import (
    ReplayPolicy,
    Served,
    gaps_by_turn,
    load_script,
    percentile,
    turn_gaps,
)

from artfleet.runtime.rpc.client import sync_channel
from artfleet.runtime.service import free_port
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet

Metrics = dict[str, float]
# (service, histogram) whose mean over a job says where a turn's time went
BREAKDOWN = (
    ("rollout", "artfleet_rollout_model_seconds"),
    ("rollout", "artfleet_rollout_sandbox_exec_seconds"),
    ("sandbox", "artfleet_sandbox_exec_seconds"),
    ("sandbox", "artfleet_sandbox_create_seconds"),
    ("reward", "artfleet_reward_scoring_seconds"),
    ("rollout", "artfleet_rollout_group_seconds"),
)


# (stage, service, histogram): the stages of a turn read from the services' own histograms
STAGE_HISTOGRAMS = (
    ("policy_request_build", "rollout", "artfleet_rollout_policy_request_build_seconds"),
    ("policy_call_worker", "rollout", "artfleet_rollout_model_seconds"),
    ("exec_worker", "rollout", "artfleet_rollout_sandbox_exec_seconds"),
    ("exec_sandbox", "sandbox", "artfleet_sandbox_exec_seconds"),
)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def scrape(url: str) -> Metrics:
    """Every sample, labelled series summed; a bucket is keyed `<name>_bucket@<le>`."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    found: Metrics = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name
            if "le" in sample.labels:
                key = f"{sample.name}@{sample.labels['le']}"
            found[key] = found.get(key, 0.0) + sample.value
    return found


def bucket_quantile(counts: dict[float, float], q: float) -> float:
    """The q-quantile (0..1) of a histogram's cumulative bucket counts {upper bound:
    count}, linear within the bucket it falls in (Prometheus' histogram_quantile)."""
    bounds = sorted(counts)
    total = counts[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if counts[bound] >= rank:
            if bound == float("inf"):
                return lower
            share = (rank - below) / max(counts[bound] - below, 1e-12)
            return lower + (bound - lower) * share
        lower, below = bound, counts[bound]
    return lower


def process_cpu_s(pid: int) -> float:
    """CPU seconds of `pid` and its reaped children (a sandbox's shells), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def fleet_cpu(fleet: LocalFleet) -> dict[str, float]:
    """CPU seconds so far of each fleet process, by its kind (rollout-2 counts as rollout)."""
    found: dict[str, float] = {}
    for process in fleet.processes:
        kind = process.name.split("-")[0]
        found[kind] = found.get(kind, 0.0) + process_cpu_s(process.proc.pid)
    return found


def command_calls(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


@dataclass(frozen=True)
class Snapshot:
    """The fleet's counters at one moment: Redis command calls, each kind's /metrics,
    each kind's process CPU, and how many requests the replay policy had served."""

    calls: dict[str, int]
    metrics: dict[str, Metrics]
    cpu: dict[str, float]
    served: int

    def histogram_mean_ms(self, before: Snapshot, kind: str, name: str) -> tuple[float, int]:
        count = self.metrics[kind].get(f"{name}_count", 0) - before.metrics[kind].get(
            f"{name}_count", 0
        )
        total = self.metrics[kind].get(f"{name}_sum", 0) - before.metrics[kind].get(
            f"{name}_sum", 0
        )
        return (total / count * 1000 if count else 0.0), int(count)

    def counter(self, before: Snapshot, kind: str, name: str) -> float:
        return self.metrics[kind].get(name, 0.0) - before.metrics[kind].get(name, 0.0)

    def histogram_p50_ms(self, before: Snapshot, kind: str, name: str) -> float:
        """The median of what `name` observed since `before`, from its buckets."""
        prefix = f"{name}_bucket@"
        counts = {
            float(key.removeprefix(prefix)): value - before.metrics[kind].get(key, 0.0)
            for key, value in self.metrics[kind].items()
            if key.startswith(prefix)
        }
        return bucket_quantile(counts, 0.5) * 1000


@dataclass
class Bench:
    fleet: LocalFleet
    policy: ReplayPolicy
    metrics_urls: dict[str, list[str]]  # service kind -> its processes' /metrics

    @classmethod
    def on(cls, fleet: LocalFleet, policy: ReplayPolicy) -> Bench:
        """A bench over a started fleet: each service's /metrics."""
        urls = {
            k: [f"http://127.0.0.1:{fleet.ports[f'{k}_metrics']}/metrics"]
            for k in ("trainer", "rollout", "sandbox", "reward")
        }
        return cls(fleet, policy, urls)

    def snapshot(self) -> Snapshot:
        totals: dict[str, Metrics] = {}
        for kind, urls in self.metrics_urls.items():
            merged: Metrics = {}
            for url in urls:
                for key, value in scrape(url).items():
                    merged[key] = merged.get(key, 0.0) + value
            totals[kind] = merged
        client = redis.Redis.from_url(self.fleet.redis_url)
        try:
            calls = command_calls(client)
        finally:
            client.close()
        return Snapshot(calls, totals, fleet_cpu(self.fleet), len(self.policy.served))

    def submit_and_wait(self, label: str, spec: JobSpecModel) -> pb.Job:
        channel = sync_channel(self.fleet.trainer_target, self.fleet.token)
        try:
            stub = trainer_pb2_grpc.TrainerStub(channel)
            job = stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
            for _ in stub.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=3600):
                pass
            job = stub.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
        finally:
            channel.close()
        if job.state != pb.JOB_STATE_SUCCEEDED:
            raise RuntimeError(f"job {label} ended {pb.JobState.Name(job.state)}: {job.error}")
        return job

    def run_job(self, label: str, spec: JobSpecModel) -> dict[str, float]:
        before = self.snapshot()
        print(f"{label}: start, uptime: {uptime()}", flush=True)
        job = self.submit_and_wait(label, spec)
        after = self.snapshot()
        print(f"{label}: uptime after: {uptime()}")
        served = self.policy.served[before.served : after.served]
        out = figures(label, job, served, before, after)
        report(label, job, served, before, after)
        print(f"{label} " + " ".join(f"{k}={v:.3f}" for k, v in out.items()), flush=True)
        return out


def figures(
    label: str, job: pb.Job, served: list[Served], before: Snapshot, after: Snapshot
) -> dict[str, float]:
    gaps_ms = [g * 1000 for g in turn_gaps(served)]
    if not gaps_ms:
        raise RuntimeError(f"{label}: no episode made two turns; served: {served[:6]}")
    groups = sum(s.groups for s in job.steps)
    rollout_s = sum(s.rollout_seconds for s in job.steps)
    calls = sum(after.calls.values()) - sum(before.calls.values())
    out = dict(
        turns=float(len(served)),
        groups=float(groups),
        rollout_s=rollout_s,
        turns_per_s=len(served) / rollout_s,
        overhead_p50=percentile(gaps_ms, 50),
        overhead_p95=percentile(gaps_ms, 95),
        policy_ms_p50=percentile([(s.answered - s.arrived) * 1000 for s in served], 50),
        gather_cpu_per_group=after.counter(
            before, "trainer", "artfleet_trainer_gather_cpu_seconds_total"
        )
        / max(1.0, after.counter(before, "trainer", "artfleet_trainer_gathered_groups_total")),
        redis_calls_per_group=calls / groups,
        redis_cpu_us_per_call=(after.cpu["redis"] - before.cpu["redis"]) / max(1, calls) * 1e6,
    )
    for kind, seconds in sorted(after.cpu.items()):
        out[f"cpu_ms_per_turn_{kind}"] = (seconds - before.cpu.get(kind, 0.0)) / len(served) * 1e3
    out["redis_calls_per_turn"] = calls / len(served)
    out.update({f"stage_{k}": v for k, v in stages(served, before, after).items()})
    return out


def stages(served: list[Served], before: Snapshot, after: Snapshot) -> dict[str, float]:
    """Where a turn's platform time goes: medians in ms (histogram ones from buckets), and
    the parts left between them as differences of medians:
    - policy_request_build: building a request body (the adapter's encoding);
    - policy_call_worker: a policy call as the worker sees it (its build, both HTTP legs,
      the policy's own time, the answer's parsing, the history's conversion);
    - policy_server: the replay policy's own time (exact, from its records);
    - http_legs: policy_call_worker - policy_server - policy_request_build;
    - exec_worker / exec_sandbox: a command as the worker sees it / inside the sandbox;
    - exec_grpc: exec_worker - exec_sandbox (the gRPC hop, both event loops);
    - bookkeeping: the turn gap - http_legs - policy_request_build - exec_worker (the
      agent's own work between the answer and the next request)."""
    found = {
        stage: after.histogram_p50_ms(before, kind, name) for stage, kind, name in STAGE_HISTOGRAMS
    }
    found["policy_server"] = percentile([(s.answered - s.arrived) * 1000 for s in served], 50)
    found["http_legs"] = (
        found["policy_call_worker"] - found["policy_server"] - found["policy_request_build"]
    )
    found["exec_grpc"] = found["exec_worker"] - found["exec_sandbox"]
    gap = percentile([g * 1000 for g in turn_gaps(served)], 50)
    found["bookkeeping"] = (
        gap - found["http_legs"] - found["policy_request_build"] - found["exec_worker"]
    )
    return found


def report(
    label: str, job: pb.Job, served: list[Served], before: Snapshot, after: Snapshot
) -> None:
    """The details behind the figures: gaps by turn, steps, Redis commands, histograms."""
    for turn, gaps in sorted(gaps_by_turn(served).items()):
        print(
            f"{label} after turn {turn}: p50_ms={percentile(gaps, 50) * 1000:.1f} "
            f"p95_ms={percentile(gaps, 95) * 1000:.1f} n={len(gaps)}"
        )
    for s in job.steps:
        print(
            f"{label} step={s.step} groups={s.groups} trajectories={s.trajectories} "
            f"turns_mean={s.turns_mean:.2f} rollout_s={s.rollout_seconds:.2f} "
            f"train_s={s.train_seconds:.2f} reward_mean={s.reward_mean:.2f}"
        )
    groups = sum(s.groups for s in job.steps)
    delta = {k: v - before.calls.get(k, 0) for k, v in after.calls.items()}
    top = sorted(delta.items(), key=lambda kv: -kv[1])[:16]
    print(
        f"{label} redis commands per group: " + ", ".join(f"{k}={v / groups:.1f}" for k, v in top)
    )
    for kind, name in BREAKDOWN:
        mean_ms, count = after.histogram_mean_ms(before, kind, name)
        if count:
            print(f"{label} {name} mean_ms={mean_ms:.1f} n={count}")


def add_rollout_worker(fleet: LocalFleet, name: str) -> str:
    """Starts another rollout worker process on the fleet's Redis; returns its /metrics."""
    port, metrics_port = free_port(), free_port()
    env = fleet.service_env("rollout")
    env.update(
        ARTFLEET_PORT=str(port), ARTFLEET_METRICS_PORT=str(metrics_port), ARTFLEET_REPLICA_ID=name
    )
    fleet._spawn(name, [sys.executable, "-m", "artfleet_rollout"], env, grpc_port=port)
    fleet._wait_serving(fleet.processes[-1], time.monotonic() + 300)
    return f"http://127.0.0.1:{metrics_port}/metrics"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--script", default="", help="replay script (JSON); default built in")
    parser.add_argument("--workdir", default="")
    parser.add_argument("--sandbox-backend", default="local", choices=("local", "docker"))
    args = parser.parse_args()
    fleet = LocalFleet(Path(args.workdir or tempfile.mkdtemp(prefix="overhead-bench-")), api=False)
    policy = ReplayPolicy(load_script(args.script), fleet.token)
    policy.start()
    # The trainer names this endpoint in every GroupTask: the workers call the replay server.
    # The sandbox: the local backend (bubblewrap), as measured before; `auto` would take
    # Docker wherever its engine answers, and the figures would change with the machine.
    fleet.extra_env = {
        "ARTFLEET_INFERENCE_PUBLIC_URL": policy.base_url,
        "ARTFLEET_SANDBOX_BACKEND": args.sandbox_backend,
    }
    spec = dict(
        environment="tool-shell",
        steps=args.steps,
        groups_per_step=args.groups,
        rollouts_per_group=args.rollouts,
        max_turns=len(load_script(args.script)) + 1,
        max_tokens=64,
        learning_rate=1e-4,
        seed=7,
    )
    print(f"fleet starting, uptime: {uptime()}", flush=True)
    fleet.start(timeout_s=600)
    try:
        bench = Bench.on(fleet, policy)
        # One episode at a time (max_concurrent=1): the cost of a turn, not of a queue.
        alone = bench.run_job(
            "serial",
            JobSpecModel.model_validate(
                {**spec, "name": "overhead-serial", "groups_per_step": 4, "max_concurrent": 1}
            ),
        )
        one = bench.run_job("1w", JobSpecModel.model_validate({**spec, "name": "overhead-1w"}))
        bench.metrics_urls["rollout"].append(add_rollout_worker(fleet, "rollout-2"))
        two = bench.run_job("2w", JobSpecModel.model_validate({**spec, "name": "overhead-2w"}))
    finally:
        fleet.stop()
        policy.stop()
    print(f"logs in {fleet.workdir / 'logs'}; uptime: {uptime()}")
    print(f"concurrent_episodes_1w={args.groups * args.rollouts}")
    print(f"overhead_ms_per_turn_p50_loaded={one['overhead_p50']:.1f}")
    print(f"redis_calls_per_group={one['redis_calls_per_group']:.1f}")
    print(f"redis_calls_per_turn={one['redis_calls_per_turn']:.2f}")
    for key, value in alone.items():  # the breakdown of the headline (serial) job
        if key.startswith("stage_"):
            print(f"overhead_{key}_ms_p50={value:.2f}")
    print(f"overhead_ms_per_turn_p50={alone['overhead_p50']:.1f}")
    print(f"overhead_ms_per_turn_p95={alone['overhead_p95']:.1f}")
    print(f"fleet_turns_per_s_1w={one['turns_per_s']:.2f}")
    print(f"fleet_turns_per_s_2w={two['turns_per_s']:.2f}")
    print(f"trainer_gather_cpu_s_per_group={one['gather_cpu_per_group']:.4f}")


if __name__ == "__main__":
    main()
