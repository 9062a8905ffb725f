"""A step's sampler/trainer mismatch through the real JobRunner (a real redis-server, an
in-process backend reporting the figures the torch backend computes): its summary carries
them with the engine that sampled, and a step past a bound warns in the job's events."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest
from runner_harness import run_to_end, runner_settings
from trainer_fakes import FakeBackend, FakeRollouts, scored

from artfleet.contracts.art_types import art
from artfleet.contracts.batches import StepBatches
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs.runner import JobRunner
from artfleet_trainer.jobs.store import JobStore

pytestmark = pytest.mark.integration
FIGURES = {
    "mismatch/tokens": 120.0,
    "mismatch/abs_delta_mean": 0.2,
    "mismatch/abs_delta_p99": 1.5,
    "mismatch/k3": 0.01,
    "mismatch/ratio_p1": 0.3,
    "mismatch/ratio_p50": 1.0,
    "mismatch/ratio_p99": 2.5,
    "mismatch/outside_0_9_1_1": 0.4,
    "mismatch/outside_0_5_2": 0.1,
}


class MeasuringBackend(FakeBackend):
    """Reports a mismatch past the default share (10% of tokens outside [0.5, 2])."""

    async def train(
        self,
        model: art.TrainableModel,
        trajectory_groups: Iterable[art.TrajectoryGroup],
        *,
        learning_rate: float = 5e-6,
    ) -> art.types.TrainResult:
        result = await super().train(model, trajectory_groups, learning_rate=learning_rate)
        result.metrics.update(FIGURES)
        return result


async def _run(
    stores: tuple[JobStore, StepBatches], **settings: Any
) -> tuple[pb.Job, list[pb.ProgressEvent]]:
    store, batches = stores
    spec = JobSpecModel.model_validate(
        dict(steps=2, groups_per_step=1, rollouts_per_group=2, gather_timeout_s=60)
    )
    job = await store.create(spec_to_proto(spec))
    rollouts = FakeRollouts(batches, scored)
    runner = JobRunner(
        runner_settings("runner-test-token", **settings),
        store,
        MeasuringBackend(),
        rollouts,
        rollouts,
        batches,
    )
    return await asyncio.wait_for(run_to_end(runner, store, job.id), 120)


async def test_each_step_records_the_mismatch_and_warns_past_the_share(
    job_stores: tuple[JobStore, StepBatches],
) -> None:
    job, events = await _run(job_stores, inference_engine="torch")
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    for summary in job.steps:
        m = summary.mismatch
        assert (m.engine, m.tokens, m.k3, m.outside_0_5_2) == ("torch", 120, 0.01, 0.1)
        assert m.warning.startswith("sampler/trainer mismatch (torch): 10.0% of trained tokens")
    logs = [(e.step, e.message) for e in events if e.kind == pb.EVENT_KIND_LOG]
    assert logs == [(s.step, f"warning: step {s.step}: {s.mismatch.warning}") for s in job.steps]
    kinds = [(e.kind, e.step) for e in events if e.step == 1]
    # The step's record first, then its warning.
    assert kinds.index((pb.EVENT_KIND_STEP_DONE, 1)) < kinds.index((pb.EVENT_KIND_LOG, 1))


async def test_the_bounds_are_the_trainers_settings(
    job_stores: tuple[JobStore, StepBatches],
) -> None:
    job, events = await _run(job_stores, mismatch_warn_outside_share=0.2)
    assert [s.mismatch.engine for s in job.steps] == ["vllm", "vllm"]  # the default engine
    assert [s.mismatch.warning for s in job.steps] == ["", ""]  # 10% <= 20%, k3 0.01 <= 0.02
    assert not [e for e in events if e.kind == pb.EVENT_KIND_LOG]
