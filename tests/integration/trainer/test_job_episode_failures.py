"""Failed episodes through the real JobRunner (a real redis-server, an in-process backend
and rollout side publishing through the step-batch contract): a step counts them by type
in its summary and, past the trainer's share, warns in `jobs watch` and `jobs status`; a
step whose every rollout failed fails the job naming the first failure where the user's
code raised it, the job and the request id of the rollout log lines."""

from __future__ import annotations

import asyncio
from typing import Any

import failing_plugin
import pytest
from rich.console import Console
from runner_harness import run_to_end, runner_settings
from trainer_fakes import FakeBackend, FakeRollouts, scored

from artfleet.contracts.batches import StepBatches
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_cli import render
from artfleet_trainer.jobs.runner import JobRunner
from artfleet_trainer.jobs.store import JobStore

pytestmark = pytest.mark.integration
ROLLOUTS = 4


def group_result(task: rollout_pb2.GroupTask, failed: list[str]) -> rollout_pb2.RunGroupResponse:
    """A group whose episodes failed on `failed`'s scenarios, the others scored."""
    response = scored(task)
    del response.group.trajectories[: len(failed)]
    run_id = f"run-{task.group_id.rsplit(':', 1)[-1]}"
    response.group.exceptions.extend(failing_plugin.failure(s, run_id) for s in failed)
    return response


def six_of_eight(task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
    """Group 0: every episode fails its check; group 1: one check, one missing key."""
    if task.group_id.endswith(":0"):
        return group_result(task, ["asked"] * ROLLOUTS)
    return group_result(task, ["asked", "missing"])


async def _run(
    stores: tuple[JobStore, StepBatches], behaviour: Any, **settings: Any
) -> tuple[pb.Job, list[pb.ProgressEvent]]:
    store, batches = stores
    spec = JobSpecModel.model_validate(
        dict(steps=1, groups_per_step=2, rollouts_per_group=ROLLOUTS, gather_timeout_s=60)
    )
    job = await store.create(spec_to_proto(spec))
    rollouts = FakeRollouts(batches, behaviour)
    runner = JobRunner(
        runner_settings("runner-test-token", **settings),
        store,
        FakeBackend(),
        rollouts,
        rollouts,
        batches,
    )
    return await asyncio.wait_for(run_to_end(runner, store, job.id), 120)


async def test_a_step_counts_failed_episodes_by_type_and_watch_and_status_warn(
    job_stores: tuple[JobStore, StepBatches], monkeypatch: pytest.MonkeyPatch
) -> None:
    job, events = await _run(job_stores, six_of_eight)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    [summary] = job.steps
    assert dict(summary.episode_failures) == {"AssertionError": 5, "KeyError": 1}
    assert (summary.episodes_failed, summary.episodes, summary.trajectories) == (6, 8, 2)
    assert summary.failure_warning == (
        "6/8 episodes failed (more than 25%): 5 AssertionError, 1 KeyError; first: "
        f"AssertionError {failing_plugin.WHERE} (rollout logs: job {job.id}, request run-0)"
    )
    [done] = [e for e in events if e.kind == pb.EVENT_KIND_STEP_DONE]
    assert done.summary == summary
    monkeypatch.setattr(render, "console", Console(width=400, highlight=False))
    with render.console.capture() as captured:
        assert render.follow(events, 1) == pb.JOB_STATE_SUCCEEDED
    watched = captured.get()
    assert "2 trajectories · 6/8 episodes failed (5 AssertionError, 1 KeyError)" in watched
    assert f"warning: step 1: {summary.failure_warning}" in watched
    with render.console.capture() as captured:
        render.job_details(job)
    status = captured.get()
    assert "failed episodes" in status and "6/8 (5 AssertionError, 1 KeyError)" in status
    assert f"warning: step 1: {summary.failure_warning}" in status


async def test_the_share_that_warns_is_the_trainers_setting(
    job_stores: tuple[JobStore, StepBatches],
) -> None:
    job, events = await _run(job_stores, six_of_eight, episode_failure_warn_share=0.75)
    [summary] = job.steps
    assert summary.episodes_failed == 6 and summary.failure_warning == ""  # 6/8 is not > 75%
    with render.console.capture() as captured:
        render.follow(events, 1)
    assert "warning" not in captured.get()


async def test_a_step_whose_rollouts_all_failed_names_the_users_frames_job_and_request(
    job_stores: tuple[JobStore, StepBatches],
) -> None:
    job, _ = await _run(job_stores, lambda task: group_result(task, ["asked"] * ROLLOUTS))
    assert job.state == pb.JOB_STATE_FAILED and not job.steps
    assert job.error == (
        f"RuntimeError: step 1: every rollout failed (8 AssertionError); first, in group "
        f"{job.id}:1:0: AssertionError {failing_plugin.WHERE}; "
        f"see the rollout worker logs for job {job.id}, request run-0"
    )
