"""A job's SFT phase under the real JobRunner on a real redis-server: it runs
once before step 1 and streams its batches, GRPO steps are numbered after its checkpoint,
a restart never runs a finished phase again; bad SFT specs are refused at submit through
gRPC and the CLI, naming the field. The backend here is the test TrainerBackend (the
torch backend's own SFT is tested in tests/unit/trainer/torch_backend/test_torch_backend_sft.py,
the whole path with a real trainer in test_fleet_sft.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY
from repo_paths import FIXTURES
from runner_harness import run_to_end, runner_settings
from submit_fleet import trainer_server
from trainer_fakes import FakeBackend, scored
from typer.testing import CliRunner

from artfleet.contracts.batches import StepBatches
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_cli.main import app
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.runner import JobRunner
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer

pytestmark = pytest.mark.integration
OFFLINE_SAMPLES = FIXTURES / "sft" / "offline_samples.json"
TOKEN = "sft-test-token"


class Rollouts:
    """Scenario source and dispatcher: answers each group as a worker would, through the
    step-batch contract."""

    def __init__(self, batches: StepBatches) -> None:
        self._batches = batches
        self.tasks: list[rollout_pb2.GroupTask] = []

    async def scenario_ids(self, environment: str, split: str) -> list[str]:
        return ["s1", "s2"]

    async def enqueue(self, tasks: Sequence[rollout_pb2.GroupTask], skip: set[str]) -> int:
        todo = [t for t in tasks if t.group_id not in skip]
        for task in todo:
            self.tasks.append(task)
            await self._batches.publish(task.job_id, task.step, task.group_id, scored(task))
        return len(todo)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    yield client
    await client.aclose()


def _spec(**sft: object) -> JobSpecModel:
    return JobSpecModel.model_validate(
        dict(
            steps=2,
            groups_per_step=1,
            rollouts_per_group=2,
            gather_timeout_s=60,
            sft=dict(data_path=str(OFFLINE_SAMPLES), min_score=0.5, batch_size=1, **sft),
        )
    )


async def _run(
    redis: aioredis.Redis, backend: FakeBackend, job: pb.Job, tmp_path: Path
) -> tuple[pb.Job, list[pb.ProgressEvent], Rollouts]:
    store, batches = JobStore(redis), StepBatches(redis)
    rollouts = Rollouts(batches)
    settings = runner_settings(
        TOKEN, art_path=str(tmp_path / "art"), trajectory_log_dir=str(tmp_path / "logs")
    )
    runner = JobRunner(settings, store, backend, rollouts, rollouts, batches)
    done, events = await run_to_end(runner, store, job.id)
    return done, events, rollouts


async def test_sft_runs_once_before_grpo_and_streams_its_batches(
    redis: aioredis.Redis, tmp_path: Path
) -> None:
    backend = FakeBackend()
    job = await JobStore(redis).create(spec_to_proto(_spec(epochs=2)))
    job, events, rollouts = await asyncio.wait_for(_run(redis, backend, job, tmp_path), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert backend.sft_calls == [4]  # 2 samples kept (score >= 0.5) x 2 epochs
    kinds = [e.kind for e in events]
    sft = [e.sft for e in events if e.kind == pb.EVENT_KIND_SFT]
    assert [(s.epoch, s.batch, s.batches) for s in sft if not s.done] == [
        (1, 1, 4),
        (1, 2, 4),
        (2, 3, 4),
        (2, 4, 4),
    ]
    done = sft[-1]
    assert done.done and done.checkpoint_step == 1
    assert list(done.epoch_losses) == pytest.approx([(2.0 + 1.0) / 2, (2 / 3 + 0.5) / 2])
    # The whole phase precedes GRPO step 1.
    assert max(i for i, k in enumerate(kinds) if k == pb.EVENT_KIND_SFT) < kinds.index(
        pb.EVENT_KIND_STEP_STARTED
    )
    assert job.sft.done and job.sft.checkpoint_step == 1 and job.sft.samples == 2
    # Prometheus: the last batch's loss and the whole phase trained.
    assert REGISTRY.get_sample_value("artfleet_sft_loss") == pytest.approx(0.5)
    assert REGISTRY.get_sample_value("artfleet_sft_progress") == 1.0
    assert dict(job.sft.skipped) == {
        "no assistant turn": 1,
        "no extra.conversation": 1,
        "score below min_score": 1,
    }
    # GRPO steps 1 and 2 are checkpoints 2 and 3; their rollouts used the SFT policy first.
    assert job.completed_steps == 2 and backend.steps[f"agent-{job.id}"] == 3
    assert [t.policy_version for t in rollouts.tasks] == [1, 2]


async def test_a_restart_never_runs_a_finished_sft_phase_again(
    redis: aioredis.Redis, tmp_path: Path
) -> None:
    store = JobStore(redis)
    # A trainer saved the SFT checkpoint and died before recording the phase as done.
    job = await store.create(spec_to_proto(_spec()))
    job.state = pb.JOB_STATE_RUNNING
    job.sft.started, job.sft.base_step = True, 0
    await store.save(job)
    backend = FakeBackend(steps={f"agent-{job.id}": 1})
    job, events, _ = await asyncio.wait_for(_run(redis, backend, job, tmp_path), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert backend.sft_calls == []  # not trained again
    assert job.sft.done and job.sft.checkpoint_step == 1
    sft = [e.sft for e in events if e.kind == pb.EVENT_KIND_SFT]
    assert len(sft) == 1 and sft[0].done and sft[0].checkpoint_step == 1  # no batch again
    assert [s.step for s in job.steps] == [1, 2]
    # And a job whose phase is recorded done resumes at its next GRPO step.
    again = await store.create(spec_to_proto(_spec()))
    again.state = pb.JOB_STATE_RUNNING
    again.sft.started = again.sft.done = True
    again.sft.checkpoint_step = 1
    again.completed_steps = 1
    await store.save(again)
    backend = FakeBackend(steps={f"agent-{again.id}": 2})
    again, _, _ = await asyncio.wait_for(_run(redis, backend, again, tmp_path), 120)
    assert again.state == pb.JOB_STATE_SUCCEEDED, again.error
    assert backend.sft_calls == [] and backend.trained == [1]  # step 2 only
    assert backend.steps[f"agent-{again.id}"] == 3


@pytest.fixture
async def trainer_target(redis: aioredis.Redis) -> AsyncIterator[str]:
    servicer = TrainerServicer(
        JobStore(redis),
        RolloutClient("127.0.0.1:1", TOKEN),  # the SFT checks come before any other service
        RewardClient("127.0.0.1:1", TOKEN),
        lambda backend: "",
    )
    server = trainer_server(servicer, TOKEN, "trainer-sft-test")
    await server.start()
    yield f"127.0.0.1:{server.port}"
    await server.stop(1)


@pytest.mark.parametrize(
    ("job_yaml", "expected"),
    [
        ("sft:\n  data_path: /nonexistent/samples.json\n", "sft.data_path: no such file"),
        (f"sft:\n  data_path: {OFFLINE_SAMPLES}\n  min_score: 9\n", "sft.data_path: no usable SFT"),
        (
            f"backend: art\nsft:\n  data_path: {OFFLINE_SAMPLES}\n  max_length: 512\n",
            "sft.max_length: not supported by the art backend",
        ),
    ],
)
async def test_bad_sft_specs_are_refused_at_submit(
    trainer_target: str, tmp_path: Path, job_yaml: str, expected: str
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(job_yaml)
    env = {"ARTFLEET_API_TOKEN": TOKEN, "COLUMNS": "300"}
    result = await asyncio.to_thread(
        CliRunner().invoke,
        app,
        ["jobs", "submit", str(spec), "--target", trainer_target],
        env=env,
    )
    assert result.exit_code == 2, result.output
    assert expected in " ".join(result.stderr.split()), result.stderr
    assert "Traceback" not in result.output
