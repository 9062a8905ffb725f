"""A trainer restart in the middle of two running jobs' steps, on a fleet of its own (it
restarts a process, so it does not share the session's torch fleet): both jobs resume
(each step abandoned is trained once after the restart), cancelling one leaves the other
running, and the other succeeds with every step on record."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fleet_jobs import (
    checkpoint_dir,
    started,
    submit_small,
    trainer_metric,
    trainer_of,
    wait_event,
)
from job_wait import ENDED, wait_ended
from waiting import poll

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRAINING = "artfleet_trainer_training"  # steps in `train` now


@pytest.fixture(scope="module")
def fleet(module_tmp: Callable[[str], Path]) -> Iterator[LocalFleet]:
    # The restarted trainer, like every other service, must stop on SIGTERM by itself.
    with started(LocalFleet(module_tmp("restart-fleet"), api=False)) as fleet:
        yield fleet


def test_trainer_restart_resumes_at_next_step(fleet: LocalFleet) -> None:
    with trainer_of(fleet) as trainer:
        job = submit_small(trainer, name="resume", steps=2)  # step 2 cut, then trained once
        # Beside it, with steps to spare: it is cancelled before its last (a cancel in a
        # job's last step lets it finish).
        other = submit_small(trainer, name="other", steps=6, lora_rank=8)
        events = trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=1500)
        wait_event(events, pb.EVENT_KIND_STEP_STARTED, 2)
        # SIGTERM while a step trains (most likely the other job's): the torch thread saves
        # that step's checkpoint during shutdown, but the step is not recorded.
        poll(lambda: trainer_metric(fleet, TRAINING), lambda n: n >= 1, timeout_s=600)
        fleet.restart("trainer")
        # Both resume: each records a step after the restart. The other is cancelled as
        # soon as it has; the first goes on to succeed.
        done = {i: _completed(trainer, i) for i in (other.id, job.id)}
        _wait_past(trainer, other.id, done[other.id])
        trainer.CancelJob(trainer_pb2.CancelJobRequest(job_id=other.id))
        _wait_past(trainer, job.id, done[job.id])
        job, other = (wait_ended(trainer, i, timeout_s=1500) for i in (job.id, other.id))
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error  # the other's cancel left it be
    assert [s.step for s in job.steps] == [1, 2]  # every step trained exactly once
    assert all(checkpoint_dir(fleet, job, s).is_dir() for s in (1, 2))
    assert other.state == pb.JOB_STATE_CANCELLED, other.error
    assert 1 <= other.completed_steps < 6
    # A step the other job was *training* at SIGTERM is saved by the torch thread during
    # shutdown, unrecorded: its checkpoint is discarded and the step trained again.
    assert [s.step for s in other.steps] == list(range(1, other.completed_steps + 1))


def _completed(trainer: trainer_pb2_grpc.TrainerStub, job_id: str) -> int:
    return trainer.GetJob(trainer_pb2.GetJobRequest(job_id=job_id)).completed_steps


def _wait_past(trainer: trainer_pb2_grpc.TrainerStub, job_id: str, done: int) -> None:
    """Until the job has recorded more than `done` steps (or ended)."""
    request = trainer_pb2.GetJobRequest(job_id=job_id)
    poll(
        lambda: trainer.GetJob(request),
        lambda j: j.completed_steps > done or j.state in ENDED,
        timeout_s=1500,
        interval_s=1.0,
    )
