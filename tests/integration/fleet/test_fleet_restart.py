"""A trainer restart in the middle of a job's step, on a fleet of its own (it restarts a
process, so it does not share the session's torch fleet): the step is abandoned, trained
once after the restart, and the job succeeds with every step on record."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fleet_jobs import checkpoint_dir, started, submit_small, trainer_of, wait_event
from waiting import poll

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2
from artfleet_cli.fleet import LocalFleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    # The restarted trainer, like every other service, must stop on SIGTERM by itself.
    with started(LocalFleet(tmp_path_factory.mktemp("restart-fleet"), api=False)) as fleet:
        yield fleet


def test_trainer_restart_resumes_at_next_step(fleet: LocalFleet) -> None:
    with trainer_of(fleet) as trainer:
        job = submit_small(trainer, name="resume", steps=2)  # step 2 cut, then trained once
        events = trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=1500)
        wait_event(events, pb.EVENT_KIND_STEP_STARTED, 2)
        fleet.restart("trainer")  # SIGTERM mid-step 2: the step is abandoned, not recorded
        request = trainer_pb2.GetJobRequest(job_id=job.id)
        job = poll(
            lambda: trainer.GetJob(request),
            lambda j: j.state in (pb.JOB_STATE_SUCCEEDED, pb.JOB_STATE_FAILED),
            timeout_s=1500,
            interval_s=1.0,
        )
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [s.step for s in job.steps] == [1, 2]  # every step trained exactly once
    assert all(checkpoint_dir(fleet, job, s).is_dir() for s in (1, 2))
