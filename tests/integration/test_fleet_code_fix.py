"""A 2-step job on `code-fix` through the real fleet (redis-server, Celery worker, the four
gRPC services, the real SmolLM2 model): the terminal agent works in the buggy project,
the hidden F2P/P2P tests run after each episode, the `tests` scorer rewards them, and
every logged trajectory carries the per-group counts."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from artfleet.runtime.rpc.client import sync_channel
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUP_METRICS = ("f2p_passed", "f2p_failed", "p2p_passed", "p2p_failed")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    fleet = LocalFleet(tmp_path_factory.mktemp("fleet-code-fix"))
    fleet.start()
    try:
        yield fleet
    finally:
        fleet.stop()


def test_code_fix_job_with_the_tests_scorer(fleet: LocalFleet) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    spec = JobSpecModel.model_validate(
        dict(
            name="codefix",
            environment="code-fix",
            steps=2,
            groups_per_step=2,
            rollouts_per_group=2,
            max_turns=2,
            max_tokens=48,
            lora_rank=4,
            reward=[{"name": "tests"}, {"name": "process", "weight": 0.1}],
        )
    )
    channel = sync_channel(fleet.trainer_target, fleet.token)
    try:
        trainer = trainer_pb2_grpc.TrainerStub(channel)
        job = trainer.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
        list(trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=1800))
        job = trainer.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
    finally:
        channel.close()
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert job.completed_steps == 2
    model_dir = fleet.workdir / "art" / job.spec.project / "models" / f"codefix-{job.id}"
    for step in (1, 2):
        rows = pq.read_table(model_dir / "trajectories" / "train" / f"{step:04d}.parquet")
        rows = rows.to_pylist()
        assert len(rows) == 4
        for row in rows:
            metrics = json.loads(row["metrics"])
            assert all(name in metrics for name in GROUP_METRICS), metrics
            # Every hidden test is counted in exactly one of its group's two numbers.
            assert metrics["f2p_passed"] + metrics["f2p_failed"] >= 1
            assert metrics["p2p_passed"] + metrics["p2p_failed"] >= 1
            assert "reward_tests" in metrics or row["reward"] is not None
