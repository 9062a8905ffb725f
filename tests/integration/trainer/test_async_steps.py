"""Asynchronous steps (max_steps_off_policy) through the real JobRunner and a real
redis-server, with an in-process backend and rollout side (as test_job_runner.py): the
steps ahead are dispatched before the step trains, the staleness bound holds and is
recorded, a stale group runs again, and a trainer stopped mid-step trains no step twice."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field

import pytest
import redis.asyncio as aioredis
from runner_harness import run_to_end, runner_settings
from trainer_fakes import FakeBackend, FakeRollouts, scored

from artfleet.contracts.art_types import art
from artfleet.contracts.batches import StepBatches
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_trainer.jobs.runner import JobRunner
from artfleet_trainer.jobs.store import JobStore

pytestmark = pytest.mark.integration

Behaviour = Callable[[rollout_pb2.GroupTask], rollout_pb2.RunGroupResponse]


def versioned(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
    """A scored group whose trajectories were sampled at the task's policy version, as
    the rollout records it when the server names no step."""
    response = scored(task)
    for trajectory in response.group.trajectories:
        trajectory.initial_policy_version = task.policy_version
        trajectory.final_policy_version = task.policy_version
    return response


class Rollouts(FakeRollouts):
    """FakeRollouts whose dispatches go in one log with the backend's trainings."""

    def __init__(self, batches: StepBatches, log: list[str]) -> None:
        super().__init__(batches, versioned)
        self.log = log  # "enqueue <step>" and "train <step>", in order

    async def enqueue(self, tasks: Sequence[rollout_pb2.GroupTask], skip: set[str]) -> int:
        self.log.extend(f"enqueue {t.step}" for t in tasks if t.group_id not in skip)
        return await super().enqueue(tasks, skip)


@dataclass
class LoggingBackend(FakeBackend):
    """FakeBackend that logs each step it trains, and can hold one step's training."""

    log: list[str] = field(default_factory=list)
    hold_step: int = 0
    holding: asyncio.Event = field(default_factory=asyncio.Event)

    async def train(
        self,
        model: art.TrainableModel,
        trajectory_groups: Iterable[art.TrajectoryGroup],
        *,
        learning_rate: float = 5e-6,
    ) -> art.types.TrainResult:
        step = self.steps[model.name] + 1
        if step == self.hold_step:
            self.holding.set()
            await asyncio.Event().wait()  # until the trainer is stopped
        self.log.append(f"train {step}")
        return await super().train(model, trajectory_groups, learning_rate=learning_rate)


@dataclass
class Fleet:
    store: JobStore
    batches: StepBatches
    backend: LoggingBackend
    rollouts: Rollouts

    def runner(self) -> JobRunner:
        settings = runner_settings("runner-test-token")
        return JobRunner(
            settings, self.store, self.backend, self.rollouts, self.rollouts, self.batches
        )

    async def run(self, job: pb.Job) -> pb.Job:
        done, _ = await run_to_end(self.runner(), self.store, job.id)
        return done


@pytest.fixture
async def fleet(redis_url: str) -> AsyncIterator[Fleet]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    batches = StepBatches(client)
    backend = LoggingBackend()
    rollouts = Rollouts(batches, backend.log)
    yield Fleet(JobStore(client), batches, backend, rollouts)
    await client.aclose()


def _spec(**fields: object) -> pb.JobSpec:
    base = dict(steps=4, groups_per_step=3, rollouts_per_group=2, gather_timeout_s=60)
    return spec_to_proto(JobSpecModel.model_validate({**base, **fields}))


async def test_k1_job_succeeds_one_version_stale_at_most_and_records_it(fleet: Fleet) -> None:
    job = await fleet.store.create(_spec(max_steps_off_policy=1))
    job = await asyncio.wait_for(fleet.run(job), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [s.step for s in job.steps] == [1, 2, 3, 4]
    assert fleet.backend.trained == [3, 3, 3, 3]
    # Step 1 is trained on-policy; every later step on groups sampled one version back.
    assert [s.staleness_max for s in job.steps] == [0, 1, 1, 1]
    assert [s.staleness_mean for s in job.steps] == [0.0, 1.0, 1.0, 1.0]
    assert all(s.stale_groups_rerun == 0 for s in job.steps)
    # Step s+1 was dispatched before step s trained.
    log = fleet.backend.log
    for step in (1, 2, 3):
        assert log.index(f"enqueue {step + 1}") < log.index(f"train {step}")
    assert len(fleet.rollouts.enqueued) == 12  # each group once


async def test_a_sync_job_dispatches_each_step_after_the_last_trained(fleet: Fleet) -> None:
    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec(steps=3))), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    log = fleet.backend.log
    for step in (1, 2):
        assert log.index(f"train {step}") < log.index(f"enqueue {step + 1}")
    assert [s.staleness_max for s in job.steps] == [0, 0, 0]
    assert all(s.trainer_idle_seconds > 0 for s in job.steps)


async def test_a_group_past_the_bound_runs_again_and_is_counted(fleet: Fleet) -> None:
    first: set[str] = set()

    def behaviour(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        response = versioned(task)
        if task.group_id.endswith(":3:0") and task.group_id not in first:
            first.add(task.group_id)  # its first run was sampled by policy 0: 2 behind
            for trajectory in response.group.trajectories:
                trajectory.initial_policy_version = 0
        return response

    fleet.rollouts.behaviour = behaviour
    job = await fleet.store.create(_spec(max_steps_off_policy=1))
    job = await asyncio.wait_for(fleet.run(job), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [s.stale_groups_rerun for s in job.steps] == [0, 0, 1, 0]
    assert max(s.staleness_max for s in job.steps) == 1
    assert fleet.rollouts.enqueued.count(f"{job.id}:3:0") == 2
    assert fleet.backend.trained == [3, 3, 3, 3]


async def test_a_trainer_stopped_mid_async_step_trains_no_step_twice(fleet: Fleet) -> None:
    job = await fleet.store.create(_spec(max_steps_off_policy=1))
    fleet.backend.hold_step = 2
    runner = fleet.runner()
    runner.start()
    try:  # stopped while step 2 trains, with step 3 dispatched ahead and answered
        await asyncio.wait_for(fleet.backend.holding.wait(), 60)
    finally:
        await runner.stop(10)
    interrupted = await fleet.store.get(job.id)
    assert interrupted.state == pb.JOB_STATE_RUNNING and interrupted.completed_steps == 1
    assert f"{job.id}:3:0" in fleet.rollouts.enqueued

    fleet.backend.hold_step = 0
    job = await asyncio.wait_for(fleet.run(interrupted), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    trained = [e for e in fleet.backend.log if e.startswith("train")]
    assert trained == ["train 1", "train 2", "train 3", "train 4"]
    assert [s.step for s in job.steps] == [1, 2, 3, 4]
    # Steps 2 and 3 were answered before the stop: their final groups were kept.
    for step in (2, 3):
        for i in range(3):
            assert fleet.rollouts.enqueued.count(f"{job.id}:{step}:{i}") == 1
    assert max(s.staleness_max for s in job.steps) <= 1
