"""Step benchmark: the same job synchronous and with `max_steps_off_policy=1`, on a real
local fleet (redis-server, Celery rollout worker, sandbox, reward, trainer with the torch
backend and SmolLM2-135M-Instruct).

    python bench/step_bench.py [--steps 4] [--groups 2] [--rollouts 2] [--max-turns 2]

Both jobs have the same seed, environment and sizes; the async job runs first (any warm-up
favours the synchronous baseline). Step time is each StepSummary's `step_seconds`
(dispatch/gather/train of that step, back to back: their sum is the job's training time).
Idle fraction: `trainer_idle_seconds` (the trainer waited for rollouts) over step time.

Last lines: `async_step_ratio=` (mean sync step time / mean async step time),
`trainer_idle_frac_sync=`, `trainer_idle_frac_async=`, and the staleness seen.
On 2 shared CPU cores the overlap is bounded by the cores: generation and training run
on one torch thread of the trainer, so what overlaps is the rollout side's own work
(sandbox execs, scoring, the episode loop) with training, and the next step's rollouts
with the current step's stragglers.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from artfleet.runtime.rpc.client import sync_channel
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet


def run_job(stub: trainer_pb2_grpc.TrainerStub, spec: JobSpecModel) -> tuple[pb.Job, float]:
    started = time.monotonic()
    job = stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
    for _ in stub.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=3600):
        pass
    job = stub.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
    if job.state != pb.JOB_STATE_SUCCEEDED:
        raise RuntimeError(f"job {spec.name} ended {pb.JobState.Name(job.state)}: {job.error}")
    return job, time.monotonic() - started


def report(label: str, job: pb.Job, wall_s: float) -> tuple[float, float]:
    steps = list(job.steps)
    step_s = [s.step_seconds for s in steps]
    idle = sum(s.trainer_idle_seconds for s in steps) / sum(step_s)
    for s in steps:
        print(
            f"{label} step={s.step} step_s={s.step_seconds:.1f} train_s={s.train_seconds:.1f} "
            f"trainer_idle_s={s.trainer_idle_seconds:.1f} "
            f"rollout_idle_s={s.rollout_idle_seconds:.1f} staleness_max={s.staleness_max}",
            flush=True,
        )
    print(f"{label} job_wall_s={wall_s:.1f} mean_step_s={statistics.fmean(step_s):.1f}")
    return statistics.fmean(step_s), idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=40)
    args = parser.parse_args()
    base = dict(
        steps=args.steps,
        groups_per_step=args.groups,
        rollouts_per_group=args.rollouts,
        max_turns=args.max_turns,
        max_tokens=args.max_tokens,
        learning_rate=1e-4,
        seed=7,
    )
    fleet = LocalFleet(Path(tempfile.mkdtemp(prefix="step-bench-")))
    fleet.start()
    try:
        channel = sync_channel(fleet.trainer_target, fleet.token)
        stub = trainer_pb2_grpc.TrainerStub(channel)
        asynchronous = run_job(
            stub, JobSpecModel.model_validate({**base, "name": "async", "max_steps_off_policy": 1})
        )
        synchronous = run_job(stub, JobSpecModel.model_validate({**base, "name": "sync"}))
        channel.close()
    finally:
        fleet.stop()
    async_mean, async_idle = report("async", *asynchronous)
    sync_mean, sync_idle = report("sync", *synchronous)
    print(f"staleness_max_async={max(s.staleness_max for s in asynchronous[0].steps)}")
    print(f"async_step_ratio={sync_mean / async_mean:.2f}")
    print(f"trainer_idle_frac_sync={sync_idle:.2f}")
    print(f"trainer_idle_frac_async={async_idle:.2f}")


if __name__ == "__main__":
    main()
