"""A local fleet started for a test module, and small jobs on it over the trainer's gRPC
API."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from chaos_fleet import parse_metrics

from artfleet.runtime.rpc.client import sync_channel
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet

# Sized to what the checks need (docs/testing.md): two groups of two, short replies.
SMALL = dict(
    groups_per_step=2, rollouts_per_group=2, max_turns=2, max_tokens=40, learning_rate=1e-3
)


@contextmanager
def trainer_of(fleet: LocalFleet) -> Iterator[trainer_pb2_grpc.TrainerStub]:
    """The fleet's trainer over an authenticated channel, closed on exit."""
    with sync_channel(fleet.trainer_target, fleet.token) as channel:
        yield trainer_pb2_grpc.TrainerStub(channel)


def submit_small(trainer: trainer_pb2_grpc.TrainerStub, **fields: object) -> pb.Job:
    spec = JobSpecModel.model_validate({**SMALL, **fields})
    return trainer.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))


def wait_event(events: Iterator[pb.ProgressEvent], kind: int, step: int) -> None:
    for event in events:
        if event.kind == kind and event.step == step:
            return
    raise AssertionError(f"stream ended before event {kind} of step {step}")


def training_span(trainer: trainer_pb2_grpc.TrainerStub, job_id: str) -> tuple[float, float]:
    """When a finished job's first step started and its last step was done (its events'
    times, in seconds)."""
    events = list(trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job_id), timeout=120))
    started_at = [e.time.ToNanoseconds() for e in events if e.kind == pb.EVENT_KIND_STEP_STARTED]
    done_at = [e.time.ToNanoseconds() for e in events if e.kind == pb.EVENT_KIND_STEP_DONE]
    assert started_at and done_at, f"job {job_id} has no step on record"
    return min(started_at) / 1e9, max(done_at) / 1e9


def ran_together(trainer: trainer_pb2_grpc.TrainerStub, *job_ids: str) -> bool:
    """Whether the jobs' training spans overlap: each began before every other ended."""
    spans = [training_span(trainer, job_id) for job_id in job_ids]
    return max(start for start, _ in spans) < min(end for _, end in spans)


def trainer_metric(fleet: LocalFleet, name: str) -> float:
    """The trainer's metric `name` (unlabelled) now; 0 when absent or not answering."""
    url = f"http://{fleet.metrics_targets()['trainer']}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return parse_metrics(reply.read().decode()).get(name, 0.0)
    except OSError:
        return 0.0


def checkpoint_dir(fleet: LocalFleet, job: pb.Job, step: int) -> Path:
    name = f"{job.spec.name}-{job.id}"
    models = fleet.workdir / "art" / job.spec.project / "models"
    return models / name / "checkpoints" / f"{step:04d}"


@contextmanager
def started(fleet: LocalFleet, timeout_s: float = 180.0) -> Iterator[LocalFleet]:
    """Started on entry (`LocalFleet.start`'s timeout), stopped on exit; then every service
    must have stopped on SIGTERM by itself (a code of 0, not -15 or -9)."""
    fleet.start(timeout_s=timeout_s)
    try:
        yield fleet
    finally:
        codes = fleet.stop()
    killed = "".join(f"\n--- {name}'s log end:\n{tail}" for name, tail in fleet.killed_logs.items())
    assert all(code is not None and code >= 0 for code in codes.values()), f"{codes}{killed}"
