"""A job with an off-policy correction through the real fleet (the session's shared torch
fleet, `torch_fleet`): the sequence_mask correction runs inside the real GRPO step on
SmolLM2 and the step's train metrics count the sequences it dropped; a tis job trains with
ART's truncated importance sampling, its step measuring the ratio it weighs by."""

from __future__ import annotations

import json

import pytest
from fleet_jobs import checkpoint_dir
from job_wait import wait_ended

from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _one_step_job(
    trainer: trainer_pb2_grpc.TrainerStub, name: str, correction: dict[str, object]
) -> pb.Job:
    """A one-step job with `correction`, submitted (its block kept as given) and ended."""
    spec = JobSpecModel.model_validate(
        dict(
            name=name,
            steps=1,
            groups_per_step=2,
            rollouts_per_group=2,
            max_turns=2,
            max_tokens=32,
            learning_rate=1e-4,
            off_policy_correction=correction,
        )
    )
    job = trainer.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
    assert job.spec.off_policy_correction.mode == correction["mode"]
    return wait_ended(trainer, job.id, timeout_s=1500)


def test_a_sequence_mask_job_succeeds_and_reports_what_it_masked(
    torch_fleet: LocalFleet, torch_trainer: trainer_pb2_grpc.TrainerStub
) -> None:
    correction = {"mode": "sequence_mask", "band_low": 0.8, "band_high": 1.25}
    job = _one_step_job(torch_trainer, "masked", correction)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [s.step for s in job.steps] == [1]
    model_dir = checkpoint_dir(torch_fleet, job, 1).parent.parent
    history = [json.loads(line) for line in (model_dir / "history.jsonl").read_text().splitlines()]
    masked = [h["train/masked_sequences"] for h in history if "train/masked_sequences" in h]
    # Sampled by the torch server from the same weights the trainer scores (both fp32 on
    # a CPU): no sequence's ratio is anywhere near the band's edges.
    assert masked == [0], [sorted(h) for h in history]


def test_a_tis_job_succeeds_and_its_step_records_the_mismatch(
    torch_trainer: trainer_pb2_grpc.TrainerStub,
) -> None:
    job = _one_step_job(torch_trainer, "truncated-is", {"mode": "tis", "cap": 2.0})
    assert job.spec.off_policy_correction.cap == 2.0
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    (step,) = job.steps
    # What the correction weighs by, measured on the same step when it trained (a tiny
    # job's groups may all score alike: nothing to train, nothing measured): the torch
    # server sampled from the weights the trainer scores, so every ratio is 1 to fp32.
    if step.mismatch.tokens:
        assert step.mismatch.engine == "torch", step
        assert abs(step.mismatch.ratio_p1 - 1) < 1e-3 and abs(step.mismatch.ratio_p99 - 1) < 1e-3
