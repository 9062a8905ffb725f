"""Evaluation inside a training job: the real JobRunner on a real redis-server,
with in-process rollouts publishing through the step-batch contract as workers do."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from runner_harness import run_to_end, runner_settings
from trainer_fakes import FakeBackend, FakeRollouts, scored

from artfleet.contracts.art_types import art
from artfleet.contracts.batches import StepBatches
from artfleet.contracts.checkpoint_layout import marked_best
from artfleet.contracts.evaluation import eval_job_id
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_trainer.jobs.runner import JobRunner
from artfleet_trainer.jobs.store import JobStore

pytestmark = pytest.mark.integration

Behaviour = Callable[[rollout_pb2.GroupTask], rollout_pb2.RunGroupResponse]
# Eval samples that pass the task check, per scenario (k = 2): s1 both, s2 one, s3 none.
PASSING = {"s1": (True, True), "s2": (True, False), "s3": (False, False)}


Passing = dict[str, tuple[bool, bool]]


def answer(task: rollout_pb2.GroupTask, passing: Passing = PASSING) -> rollout_pb2.RunGroupResponse:
    response = scored(task)
    if task.job_id.endswith("-eval"):
        for trajectory, passed in zip(
            response.group.trajectories, passing[task.scenario_id], strict=True
        ):
            trajectory.metrics["check_passed"].bool_value = passed
            trajectory.reward = 1.0 if passed else 0.0
    return response


class LoggingBackend(FakeBackend):
    """FakeBackend whose models keep ART's logs under a test directory."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    async def register_model(self, model: art.TrainableModel) -> None:
        model.base_path = str(self.path)
        await super().register_model(model)


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    yield client
    await client.aclose()


async def run_job(
    redis: aioredis.Redis,
    backend: LoggingBackend,
    spec: JobSpecModel,
    behaviour: Behaviour = answer,
) -> tuple[pb.Job, list[pb.ProgressEvent], FakeRollouts]:
    store, batches = JobStore(redis), StepBatches(redis)
    rollouts = FakeRollouts(batches, behaviour)
    settings = runner_settings(
        "eval-test-token",
        art_path=str(backend.path),
        trajectory_log_dir=str(backend.path / "logs"),
    )
    runner = JobRunner(settings, store, backend, rollouts, rollouts, batches)
    job = await store.create(spec_to_proto(spec))
    done, events = await run_to_end(runner, store, job.id)
    return done, events, rollouts


async def test_a_job_with_eval_every_steps_logs_val_metrics(
    redis: aioredis.Redis, tmp_path: Path
) -> None:
    spec = JobSpecModel.model_validate(
        dict(
            steps=3,
            groups_per_step=2,
            rollouts_per_group=2,
            eval_every_steps=2,
            eval_split="test",
            eval_k=2,
            gather_timeout_s=60,
        )
    )
    job, events, rollouts = await asyncio.wait_for(
        run_job(redis, LoggingBackend(tmp_path), spec), 120
    )
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    # Before step 1, at step 2 (every 2) and after the last step.
    assert [e.step for e in job.evals] == [0, 2, 3]
    assert [e.step for e in events if e.kind == pb.EVENT_KIND_EVAL] == [0, 2, 3]
    first = job.evals[0]
    # Hand count, k = 2: pass@2 = (1 + 1 + 0) / 3; avg@2 = (1 + 0.5 + 0) / 3.
    assert first.pass_at_k == pytest.approx(2 / 3)
    assert first.avg_at_k == pytest.approx(0.5)
    assert first.success_rate == pytest.approx(3 / 6)
    assert first.reward_mean == pytest.approx(0.5)
    assert [(r.scenario_id, r.successes, r.samples) for r in first.results] == [
        ("s1", 2, 2),
        ("s2", 1, 2),
        ("s3", 0, 2),
    ]
    eval_tasks = [t for t in rollouts.tasks if t.job_id == eval_job_id(job.id)]
    assert {t.rollouts for t in eval_tasks} == {2} and len(eval_tasks) == 9
    assert all(t.step in (0, 2, 3) for t in eval_tasks)
    # ART's own logs: the val split's history entries and trajectory parquet files.
    model_dir = tmp_path / job.spec.project / "models" / f"{job.spec.name}-{job.id}"
    history = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    val = [h for h in history if any(k.startswith("val/") for k in h)]
    assert [h["step"] for h in val] == [0, 2, 3]
    assert val[0]["val/pass@2"] == pytest.approx(2 / 3)
    assert (model_dir / "trajectories" / "val" / "0002.parquet").is_file()


async def test_eval_samples_at_eval_temperature_and_training_at_the_jobs(
    redis: aioredis.Redis, tmp_path: Path
) -> None:
    spec = JobSpecModel.model_validate(
        dict(
            steps=1,
            groups_per_step=2,
            rollouts_per_group=2,
            temperature=0.7,
            eval_every_steps=1,
            eval_k=2,
            eval_temperature=0.0,  # greedy: 0 must not fall back to the job's 0.7
            gather_timeout_s=60,
        )
    )
    job, _, rollouts = await asyncio.wait_for(run_job(redis, LoggingBackend(tmp_path), spec), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    by_kind = {(t.job_id == eval_job_id(job.id), t.temperature) for t in rollouts.tasks}
    assert by_kind == {(True, 0.0), (False, 0.7)}  # doubles on the wire: exact


async def test_no_eval_without_eval_every_steps_and_sampled_rollouts_on_disk(
    redis: aioredis.Redis, tmp_path: Path
) -> None:
    spec = JobSpecModel.model_validate(
        dict(
            steps=1,
            groups_per_step=2,
            rollouts_per_group=2,
            gather_timeout_s=60,
            experiment="sampled",
            log_sample_rate=1.0,
        )
    )
    job, _, rollouts = await asyncio.wait_for(run_job(redis, LoggingBackend(tmp_path), spec), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert list(job.evals) == [] and all(not t.job_id.endswith("-eval") for t in rollouts.tasks)
    written = sorted((tmp_path / "logs" / "sampled" / "step_1").glob("*.json"))
    assert len(written) == 4  # every rollout at rate 1.0: 2 groups x 2
    record = json.loads(written[0].read_text())
    assert record["metadata"]["job_id"] == job.id and record["metadata"]["step"] == 1
    assert record["messages"][0] == {"role": "user", "content": "task"}
    # ART's parquet logs of the same step, beside them.
    model_dir = tmp_path / job.spec.project / "models" / f"{job.spec.name}-{job.id}"
    from art.utils.trajectory_logging import read_trajectory_groups_parquet

    groups = read_trajectory_groups_parquet(model_dir / "trajectories" / "train" / "0001.parquet")
    assert sum(len(g.trajectories) for g in groups) == 4


class CheckpointingBackend(LoggingBackend):
    """Writes a checkpoint folder per step in ART's layout, step 0 at registration (as the
    torch backend does)."""

    def _save(self, model: art.TrainableModel, step: int) -> None:
        folder = self.path / model.project / "models" / model.name / "checkpoints" / f"{step:04d}"
        folder.mkdir(parents=True)
        (folder / "adapter_config.json").write_text("{}")

    async def register_model(self, model: art.TrainableModel) -> None:
        await super().register_model(model)
        self._save(model, 0)

    async def train(
        self,
        model: art.TrainableModel,
        trajectory_groups: Iterable[art.TrajectoryGroup],
        *,
        learning_rate: float = 5e-6,
    ) -> art.types.TrainResult:
        result = await super().train(model, trajectory_groups, learning_rate=learning_rate)
        self._save(model, result.step)
        return result


async def test_retention_keeps_exactly_the_last_k_and_the_best(
    redis: aioredis.Redis, tmp_path: Path
) -> None:
    # Every eval passes s1 only, except at step 1, where every task passes: step 1 is best.
    usual: Passing = {"s1": (True, True), "s2": (False, False), "s3": (False, False)}
    best_at: Passing = {"s1": (True, True), "s2": (True, True), "s3": (True, False)}

    def answer_by_step(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        return answer(task, best_at if task.step == 1 else usual)

    spec = JobSpecModel.model_validate(
        dict(
            steps=5,
            groups_per_step=1,
            eval_every_steps=1,
            keep_last=2,
            keep_best_metric="pass_at_k",
            gather_timeout_s=60,
        )
    )
    backend = CheckpointingBackend(tmp_path)
    job, _, _ = await asyncio.wait_for(run_job(redis, backend, spec, answer_by_step), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [round(e.pass_at_k, 3) for e in job.evals] == [0.333, 1.0, 0.333, 0.333, 0.333, 0.333]
    folder = tmp_path / job.spec.project / "models" / f"{job.spec.name}-{job.id}" / "checkpoints"
    assert sorted(int(p.name) for p in folder.iterdir()) == [1, 4, 5]
    assert marked_best(folder.parent) == 1  # what name@best serves and exports
