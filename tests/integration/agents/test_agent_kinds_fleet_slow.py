"""A 2-step job on each new agent kind's environment through the real fleet (redis-server,
Celery worker, the four gRPC services, the real SmolLM2): game-2048 (MCP, evaluate in the
episode's session), tool-shell (tool calling in the sandbox) and math-single (one answer,
answer_check). The session's shared torch fleet (`torch_fleet`, tests/integration/conftest.py)
runs the three jobs, one after another."""

from __future__ import annotations

from typing import Any

import pytest

from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL = dict(
    steps=2, groups_per_step=2, rollouts_per_group=2, max_turns=2, max_tokens=40,
    learning_rate=1e-3, lora_rank=4,
)  # fmt: skip
JOBS: dict[str, dict[str, Any]] = {
    "game-2048": {"reward": [{"name": "mcp_evaluate"}]},
    "tool-shell": {"reward": [{"name": "process"}, {"name": "task_check"}]},
    "math-single": {"max_turns": 1, "reward": [{"name": "answer_check"}]},
}


@pytest.fixture
def trainer(torch_trainer: trainer_pb2_grpc.TrainerStub) -> trainer_pb2_grpc.TrainerStub:
    return torch_trainer


@pytest.mark.parametrize("environment", list(JOBS))
def test_two_step_job_succeeds(trainer: trainer_pb2_grpc.TrainerStub, environment: str) -> None:
    spec = JobSpecModel.model_validate(
        {
            **SMALL,
            "name": environment.replace("-", ""),
            "environment": environment,
            **JOBS[environment],
        }
    )
    job = trainer.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
    events = list(trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=1500))
    assert [e.step for e in events if e.kind == pb.EVENT_KIND_STEP_DONE] == [1, 2]
    job = trainer.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    rewards = [round(s.reward_mean, 3) for s in job.steps]
    seconds = [round(s.step_seconds, 1) for s in job.steps]
    print(f"{environment}: step rewards {rewards}, step seconds {seconds}")
    assert len(rewards) == 2 and all(s.trajectories > 0 for s in job.steps)
