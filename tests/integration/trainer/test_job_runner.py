"""The trainer's JobRunner end to end without a model: an in-process backend implementing
TrainerBackend, a real redis-server, and an in-process rollout side that publishes its
groups through the step-batch contract as rollout workers do."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import kombu.exceptions
import pytest
import redis.asyncio as aioredis
from runner_harness import events_until_done, run_to_end, runner_settings
from trainer_fakes import FakeBackend, FakeRollouts, scored

from artfleet.contracts.batches import StepBatches, StepKeys
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_trainer import metrics
from artfleet_trainer.jobs.runner import JobRunner
from artfleet_trainer.jobs.store import TERMINAL, JobStore

pytestmark = pytest.mark.integration


@dataclass
class Fleet:
    store: JobStore
    batches: StepBatches
    redis: aioredis.Redis
    backend: FakeBackend
    rollouts: FakeRollouts

    def runner(self) -> JobRunner:
        """A runner on this fleet's store, backend and rollouts (not started)."""
        settings = runner_settings("runner-test-token")
        return JobRunner(
            settings, self.store, self.backend, self.rollouts, self.rollouts, self.batches
        )

    async def run(self, job: pb.Job, from_seq: int = 0) -> pb.Job:
        """Runs the runner until `job` ends (followed through its event stream from
        `from_seq`: a resumed job's first terminal state is not its end)."""
        done, _ = await run_to_end(self.runner(), self.store, job.id, from_seq)
        return done


@pytest.fixture
async def fleet(redis_url: str) -> AsyncIterator[Fleet]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    batches = StepBatches(client)
    yield Fleet(JobStore(client), batches, client, FakeBackend(), FakeRollouts(batches))
    await client.aclose()


def _spec(**fields: object) -> pb.JobSpec:
    base = dict(steps=2, groups_per_step=3, rollouts_per_group=2, gather_timeout_s=60)
    return spec_to_proto(JobSpecModel.model_validate({**base, **fields}))


async def test_a_two_step_job_succeeds_and_its_batches_are_deleted(fleet: Fleet) -> None:
    groups, cpu = metrics.GATHERED_GROUPS._value.get(), metrics.GATHER_CPU_SECONDS._value.get()
    job = await fleet.store.create(_spec())
    job = await asyncio.wait_for(fleet.run(job), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert job.completed_steps == 2 and [s.groups for s in job.steps] == [3, 3]
    # the trainer's CPU per gathered group (docs/scaling.md) counts each step's groups once
    assert metrics.GATHERED_GROUPS._value.get() == groups + 6
    assert metrics.GATHER_CPU_SECONDS._value.get() > cpu
    assert fleet.backend.trained == [3, 3]
    for step in (1, 2):
        keys = StepKeys(job.id, step)
        left = {k.decode() async for k in fleet.redis.scan_iter(match=keys.pattern)}
        assert left == {keys.closed}


async def test_restart_goes_on_after_the_recorded_step_and_keeps_scored_groups(
    fleet: Fleet,
) -> None:
    job = await fleet.store.create(_spec(steps=3))
    job.completed_steps = 1  # step 1 recorded with its checkpoint
    await fleet.store.set_state(job, pb.JOB_STATE_RUNNING)  # a trainer died mid-job
    fleet.backend.steps[f"{job.spec.name}-{job.id}"] = 1
    # Step 2 had started: one group scored, one failed (it runs again).
    await fleet.batches.publish(job.id, 2, f"{job.id}:2:0", scored(_task(job.id, 2, 0)))
    await fleet.batches.publish(job.id, 2, f"{job.id}:2:1", rollout_pb2.RunGroupResponse())
    job = await asyncio.wait_for(fleet.run(job), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert job.completed_steps == 3 and [s.step for s in job.steps] == [2, 3]
    assert fleet.rollouts.enqueued == [f"{job.id}:2:1", f"{job.id}:2:2"] + [
        f"{job.id}:3:{i}" for i in range(3)
    ]
    assert await fleet.redis.exists(StepKeys(job.id, 1).closed) == 1


async def test_a_fail_job_outcome_fails_the_job_with_the_reason(fleet: Fleet) -> None:
    def behaviour(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        if task.group_id.endswith(":1"):
            return rollout_pb2.RunGroupResponse(
                outcome=pb.RewardOutcome(fail_job="scorer 'judge' failed: unavailable")
            )
        return scored(task)

    fleet.rollouts.behaviour = behaviour
    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec())), 120)
    assert job.state == pb.JOB_STATE_FAILED
    assert "RewardFailedJob" in job.error and "scorer 'judge' failed: unavailable" in job.error
    assert fleet.backend.trained == []


async def test_a_step_with_every_group_dropped_fails_clearly(fleet: Fleet) -> None:
    fleet.rollouts.behaviour = lambda task: rollout_pb2.RunGroupResponse(
        outcome=pb.RewardOutcome(group_dropped=True)
    )
    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec())), 120)
    assert job.state == pb.JOB_STATE_FAILED
    assert "step 1: no group left to train on; the reward service dropped 3" in job.error
    assert fleet.backend.trained == []


def _task(job_id: str, step: int, index: int) -> rollout_pb2.GroupTask:
    return rollout_pb2.GroupTask(
        job_id=job_id, step=step, group_id=f"{job_id}:{step}:{index}", rollouts=2
    )


class OutageOnce(FakeRollouts):
    """The broker is unreachable for the first dispatch (Redis restarting)."""

    def __init__(self, batches: StepBatches) -> None:
        super().__init__(batches)
        self.outages = 1

    async def enqueue(self, tasks: Sequence[rollout_pb2.GroupTask], skip: set[str]) -> int:
        if self.outages:
            self.outages -= 1
            raise kombu.exceptions.OperationalError("Error 111 connecting to redis")
        return await super().enqueue(tasks, skip)


async def test_an_outage_interrupts_the_job_which_resumes_instead_of_failing(
    fleet: Fleet,
) -> None:
    fleet.rollouts = OutageOnce(fleet.batches)
    interruptions = metrics.JOB_INTERRUPTIONS._value.get()
    resumes = metrics.JOB_RESUMES._value.get()
    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec())), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert metrics.JOB_INTERRUPTIONS._value.get() == interruptions + 1
    assert metrics.JOB_RESUMES._value.get() == resumes + 1  # taken up again while RUNNING
    assert [s.step for s in job.steps] == [1, 2]


async def test_the_train_ledger_records_each_step_once_with_its_groups(fleet: Fleet) -> None:
    def behaviour(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        response = scored(task)
        if task.group_id.endswith(":2"):
            response.outcome.group_dropped = True
        return response

    fleet.rollouts.behaviour = behaviour
    trained = metrics.STEPS_TRAINED._value.get()
    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec())), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    ledger = await fleet.store.trained_ledger(job.id)
    assert [e.step for e in ledger] == [1, 2]
    for entry in ledger:
        assert entry.groups == [f"{job.id}:{entry.step}:0", f"{job.id}:{entry.step}:1"]
        assert entry.trajectories == 4 and entry.dropped == 2 and entry.failed_groups == 0
    assert metrics.STEPS_TRAINED._value.get() == trained + 2
    again = await fleet.store.record_step(job, ledger[0], pb.ProgressEvent())
    assert again == 2  # a second training of step 1 would be counted


async def test_num_epochs_and_dataset_size_end_the_job_early(fleet: Fleet) -> None:
    # 2 of the 3 scenarios, 2 epochs, 1 group per step: 4 steps although 10 were asked.
    job = await fleet.store.create(_spec(steps=10, groups_per_step=1, dataset_size=2, num_epochs=2))
    job = await asyncio.wait_for(fleet.run(job), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert job.completed_steps == 4 and fleet.backend.trained == [1, 1, 1, 1]


def _judge_failed(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
    """RULER with `on_error: zero` whose judge cannot hold the group: every reward 0."""
    response = scored(task)
    for trajectory in response.group.trajectories:
        trajectory.reward = 0.0
    response.outcome.failures.add(
        scorer="ruler",
        type="invalid_output",
        message="ContextWindowExceededError: maximum context length is 2048 tokens",
        trajectory=-1,
        action="zero",
    )
    return response


async def test_steps_whose_scorers_failed_on_every_group_fail_the_job_naming_it(
    fleet: Fleet,
) -> None:
    fleet.rollouts.behaviour = _judge_failed
    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec(steps=5))), 120)
    assert job.state == pb.JOB_STATE_FAILED
    # The default limit (3 in a row): the third such step is recorded, then the job stops.
    assert job.completed_steps == 3 and [s.scoring_failed for s in job.steps] == [True] * 3
    assert [s.scorer_errors for s in job.steps] == [3, 3, 3]
    assert job.steps[0].scorer_error.startswith("ruler: invalid_output: ContextWindowExceeded")
    assert "ScoringFailed" in job.error and "steps 1-3" in job.error
    assert "ruler: invalid_output: ContextWindowExceededError" in job.error
    # Resumed with the judge still failing: the streak goes on, the first step stops it.
    resumed, from_seq = await _resumed(fleet, job)
    job = await asyncio.wait_for(fleet.run(resumed, from_seq), 120)
    assert job.state == pb.JOB_STATE_FAILED and job.completed_steps == 4
    assert "steps 2-4" in job.error


async def test_a_job_whose_steps_all_trained_nothing_does_not_end_plain_succeeded(
    fleet: Fleet,
) -> None:
    def equal_rewards(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        response = scored(task)
        for trajectory in response.group.trajectories:
            trajectory.reward = 0.0
        return response

    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec())), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED and not job.trained_nothing
    fleet.rollouts.behaviour = equal_rewards
    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec())), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED and job.trained_nothing
    assert [s.trained_sequences for s in job.steps] == [0, 0]
    (end,) = [e for e in await events_until_done(fleet.store, job.id) if e.state in TERMINAL]
    assert end.message.startswith("trained nothing: no step had a sequence to train")


async def test_a_dropped_step_names_the_scorer_that_dropped_it(fleet: Fleet) -> None:
    def behaviour(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        response = _judge_failed(task)
        response.outcome.group_dropped = True
        response.outcome.failures[0].action = "drop_group"
        response.ClearField("group")
        return response

    fleet.rollouts.behaviour = behaviour
    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec())), 120)
    assert job.state == pb.JOB_STATE_FAILED
    assert "dropped 3: ruler: invalid_output: ContextWindowExceededError" in job.error


class PolicyDownAtFirst(FakeRollouts):
    """The policy endpoint does not serve for the first `down` probes (an inference
    service still starting after a restart); `down` < 0: never again."""

    def __init__(self, batches: StepBatches, down: int) -> None:
        super().__init__(batches)
        self.down = down
        self.dispatched_while_down = 0

    async def check_policy(self, base_url: str, policy: str) -> str | None:
        if self.down == 0:
            return None
        self.down -= 1
        return "APIConnectionError: Connection refused"

    async def enqueue(self, tasks: Sequence[rollout_pb2.GroupTask], skip: set[str]) -> int:
        if self.down != 0:
            self.dispatched_while_down += len(tasks)
        return await super().enqueue(tasks, skip)


async def _run_with_probe(fleet: Fleet, rollouts: PolicyDownAtFirst, **settings: object) -> pb.Job:
    runner = JobRunner(
        runner_settings("runner-test-token", **settings),
        fleet.store,
        fleet.backend,
        rollouts,
        rollouts,
        fleet.batches,
        policy_probe=rollouts,
    )
    job = await fleet.store.create(_spec(steps=1))
    done, _ = await asyncio.wait_for(run_to_end(runner, fleet.store, job.id), 120)
    return done


async def test_nothing_is_dispatched_until_the_policy_serves(fleet: Fleet) -> None:
    rollouts = PolicyDownAtFirst(fleet.batches, down=2)
    waited = metrics.POLICY_WAIT_SECONDS._value.get()
    job = await _run_with_probe(fleet, rollouts)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert rollouts.dispatched_while_down == 0
    assert rollouts.down == 0
    assert metrics.POLICY_WAIT_SECONDS._value.get() > waited
    assert job.steps[0].trajectories == 6


async def test_a_policy_outage_past_its_budget_fails_the_job_saying_so(fleet: Fleet) -> None:
    rollouts = PolicyDownAtFirst(fleet.batches, down=-1)
    job = await _run_with_probe(fleet, rollouts, policy_outage_s=0.5)
    assert job.state == pb.JOB_STATE_FAILED
    assert "ARTFLEET_POLICY_OUTAGE_S" in job.error and "Connection refused" in job.error
    assert rollouts.dispatched_while_down == 0


async def _resumed(fleet: Fleet, job: pb.Job) -> tuple[pb.Job, int]:
    """ResumeJob on an ended job; the seq of its resume event, to follow the run from."""
    ended = await events_until_done(fleet.store, job.id)
    return await fleet.store.resume(job.id), ended[-1].seq + 1


async def test_a_failed_job_resumes_after_its_checkpoint_running_its_failed_step_afresh(
    fleet: Fleet,
) -> None:
    verdict = {"fail": True}  # the judge is back for the resumed run

    def behaviour(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        if verdict["fail"] and task.group_id.endswith(":2:1"):
            return rollout_pb2.RunGroupResponse(
                outcome=pb.RewardOutcome(fail_job="scorer 'judge' failed: unavailable")
            )
        return scored(task)

    fleet.rollouts.behaviour = behaviour
    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec(steps=3))), 120)
    assert job.state == pb.JOB_STATE_FAILED and job.completed_steps == 1
    verdict["fail"] = False
    fleet.rollouts.enqueued.clear()
    resumed, from_seq = await _resumed(fleet, job)
    assert resumed.state == pb.JOB_STATE_QUEUED
    job = await asyncio.wait_for(fleet.run(resumed, from_seq), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert job.error == "" and job.config_hash == resumed.config_hash
    assert [s.step for s in job.steps] == [1, 2, 3]  # step 1's summary from the first run
    (resume,) = job.resumes
    assert resume.state == pb.JOB_STATE_FAILED and resume.completed_steps == 1
    assert "scorer 'judge' failed: unavailable" in resume.error
    # Step 2's fail_job group (final) and its scored ones went: all three ran again.
    assert fleet.rollouts.enqueued == [f"{job.id}:{s}:{i}" for s in (2, 3) for i in range(3)]
    assert fleet.backend.trained == [3, 3, 3]  # no step trained twice
    assert [e.step for e in await fleet.store.trained_ledger(job.id)] == [1, 2, 3]
    assert not await fleet.store.resume_pending(job.id)


class ReleaseCutShort(JobStore):
    """A job's own lease release that the runner's stop cancels: it waits forever the
    first time (a cancel landing right after the job ended, before its release ran)."""

    def __init__(self, redis: aioredis.Redis) -> None:
        super().__init__(redis)
        self.releasing = asyncio.Event()

    async def release_lease(self, job_id: str, owner: str) -> None:
        if not self.releasing.is_set():
            self.releasing.set()
            await asyncio.Event().wait()
        await super().release_lease(job_id, owner)


async def test_a_stop_that_cuts_an_ended_jobs_release_short_still_frees_its_lease(
    fleet: Fleet,
) -> None:
    """Another trainer (a resume on a new replica) takes the job at once instead of
    waiting out the lease."""
    fleet.store = store = ReleaseCutShort(fleet.redis)
    runner = fleet.runner()
    job = await store.create(_spec())
    runner.start()
    try:
        await asyncio.wait_for(store.releasing.wait(), 120)
    finally:
        await runner.stop(10)
    assert (await store.get(job.id)).state == pb.JOB_STATE_SUCCEEDED
    assert await store.acquire_lease(job.id, "another-trainer", 30)


async def test_a_job_cancelled_before_any_step_resumes_from_step_one(fleet: Fleet) -> None:
    job = await fleet.store.create(_spec())
    cancelled = await fleet.store.request_cancel(job.id)
    assert cancelled.state == pb.JOB_STATE_CANCELLED
    resumed, from_seq = await _resumed(fleet, cancelled)
    job = await asyncio.wait_for(fleet.run(resumed, from_seq), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error  # its cancel flag went
    assert [s.step for s in job.steps] == [1, 2]
    assert job.resumes[0].state == pb.JOB_STATE_CANCELLED and job.resumes[0].completed_steps == 0


@dataclass
class InterruptedInTraining(FakeBackend):
    """Step `at` trains until the runner is stopped; its checkpoint is saved all the same,
    as the torch thread finishes the step it was interrupted in."""

    at: int = 2
    training: asyncio.Event = field(default_factory=asyncio.Event)

    async def train(
        self, model: Any, trajectory_groups: Any, *, learning_rate: float = 5e-6
    ) -> Any:
        if self.steps[model.name] + 1 != self.at or self.training.is_set():
            return await super().train(model, trajectory_groups, learning_rate=learning_rate)
        self.training.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.steps[model.name] += 1  # saved, never recorded
        raise AssertionError("unreachable")


async def test_a_step_interrupted_in_training_is_trained_again_and_recorded_once(
    fleet: Fleet,
) -> None:
    backend = InterruptedInTraining()
    fleet.backend = backend
    job = await fleet.store.create(_spec(steps=3))
    name = f"{job.spec.name}-{job.id}"
    discarded = metrics.STEPS_DISCARDED._value.get()
    runner = fleet.runner()
    runner.start()
    await asyncio.wait_for(backend.training.wait(), 120)
    await runner.stop(10)  # SIGTERM while step 2 trains
    stopped = await fleet.store.get(job.id)
    assert stopped.state == pb.JOB_STATE_RUNNING and stopped.completed_steps == 1
    assert backend.steps[name] == 2  # checkpoint 2 on disk, step 2 on no record
    job = await asyncio.wait_for(fleet.run(stopped), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [s.step for s in job.steps] == [1, 2, 3]
    assert [e.step for e in await fleet.store.trained_ledger(job.id)] == [1, 2, 3]
    assert backend.steps[name] == 3
    assert metrics.STEPS_DISCARDED._value.get() == discarded + 1
    events = await events_until_done(fleet.store, job.id)
    assert [e.step for e in events if e.kind == pb.EVENT_KIND_STEP_DONE] == [1, 2, 3]
    (note,) = [e.message for e in events if e.kind == pb.EVENT_KIND_LOG]
    assert "checkpoint 2 was saved but the step never recorded" in note


@dataclass
class CancelledInLastStep(FakeBackend):
    """The job's cancel comes while its last step trains."""

    store: JobStore | None = None
    last: int = 2

    async def train(
        self, model: Any, trajectory_groups: Any, *, learning_rate: float = 5e-6
    ) -> Any:
        if self.steps[model.name] + 1 == self.last and self.store is not None:
            job_id = model.name.rsplit("-", 1)[-1]
            assert (await self.store.request_cancel(job_id)).state == pb.JOB_STATE_CANCELLING
        return await super().train(model, trajectory_groups, learning_rate=learning_rate)


async def test_a_cancel_in_the_last_step_cancels_and_the_job_resumes_to_succeed(
    fleet: Fleet,
) -> None:
    fleet.backend = CancelledInLastStep(store=fleet.store)
    job = await asyncio.wait_for(fleet.run(await fleet.store.create(_spec())), 120)
    assert job.state == pb.JOB_STATE_CANCELLED and job.completed_steps == 2
    resumed, from_seq = await _resumed(fleet, job)
    fleet.backend.store = None
    job = await asyncio.wait_for(fleet.run(resumed, from_seq), 120)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [s.step for s in job.steps] == [1, 2] and fleet.backend.trained == [3, 3]
