"""An asynchronous job (max_steps_off_policy=1) through the real fleet: redis-server,
Celery worker, the four gRPC services, SmolLM2 on the torch backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from artfleet.runtime.rpc.client import sync_channel
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[trainer_pb2_grpc.TrainerStub]:
    fleet = LocalFleet(tmp_path_factory.mktemp("fleet-async"))
    fleet.start()
    channel = sync_channel(fleet.trainer_target, fleet.token)
    try:
        yield trainer_pb2_grpc.TrainerStub(channel)
    finally:
        channel.close()
        fleet.stop()


def test_an_async_job_succeeds_at_most_one_version_stale(
    trainer: trainer_pb2_grpc.TrainerStub,
) -> None:
    spec = JobSpecModel.model_validate(
        dict(
            name="async",
            steps=3,
            groups_per_step=2,
            rollouts_per_group=2,
            max_turns=2,
            max_tokens=32,
            learning_rate=1e-4,
            max_steps_off_policy=1,
        )
    )
    job = trainer.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
    for _ in trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=1500):
        pass
    job = trainer.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [s.step for s in job.steps] == [1, 2, 3]
    assert all(s.staleness_max <= 1 for s in job.steps)
    # Step 2 was dispatched with step 1: sampled by policy 0 (one behind) unless its
    # requests waited for step 1's training (one torch thread), then by policy 1.
    assert job.steps[1].staleness_max in (0, 1)
    assert all(s.trainer_idle_seconds >= 0 and s.step_seconds > 0 for s in job.steps)
