"""SFT warm-start through a real fleet, end to end: redis-server, the trainer
with the torch backend and the real SmolLM2-135M-Instruct, Celery rollout worker, reward
and sandbox processes. A job with an `sft` phase on offline-format samples lowers their
loss, GRPO steps then run from the SFT adapter, and the job SUCCEEDS; `jobs watch` prints
the phase's batches as it prints steps. About 100 s on two cores (SFT 34 s of it), on the
session's shared torch fleet (`torch_fleet`, tests/integration/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from repo_paths import FIXTURES
from safetensors.torch import load_file

from artfleet.runtime.rpc.client import sync_channel
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]
OFFLINE_SAMPLES = FIXTURES / "sft" / "offline_samples.json"


@pytest.fixture
def fleet(torch_fleet: LocalFleet) -> LocalFleet:
    return torch_fleet


def _adapter(fleet: LocalFleet, job: pb.Job, step: int) -> dict[str, torch.Tensor]:
    name = f"{job.spec.name}-{job.id}"
    models = fleet.workdir / "art" / job.spec.project / "models"
    path = models / name / "checkpoints" / f"{step:04d}"
    return load_file(str(path / "adapter_model.safetensors"))


def _norm(tensors: dict[str, torch.Tensor]) -> float:
    return float(sum(t.float().pow(2).sum() for t in tensors.values()) ** 0.5)


def test_sft_phase_lowers_the_loss_and_grpo_continues_from_its_adapter(
    fleet: LocalFleet,
) -> None:
    spec = JobSpecModel.model_validate(
        dict(
            name="sft",
            experiment="sft-warm-start",  # its own sample logs on the shared fleet
            environment="math-single",
            steps=2,
            groups_per_step=1,
            rollouts_per_group=2,
            max_turns=1,
            max_tokens=16,
            learning_rate=1e-3,
            lora_rank=4,
            gather_timeout_s=600,
            log_sample_rate=1.0,  # every rollout on disk, with the policy that sampled it
            skip_bad_records=True,  # the fixture holds a sample without its conversation
            sft=dict(
                data_path=str(OFFLINE_SAMPLES),
                min_score=0.5,
                epochs=4,
                learning_rate=1e-2,
                batch_size=1,
            ),
        )
    )
    channel = sync_channel(fleet.trainer_target, fleet.token)
    stub = trainer_pb2_grpc.TrainerStub(channel)
    try:
        job = stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
        events = list(stub.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=900))
        job = stub.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
    finally:
        channel.close()
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error

    sft = [e.sft for e in events if e.kind == pb.EVENT_KIND_SFT]
    batches, done = [s for s in sft if not s.done], sft[-1]
    assert [s.batch for s in batches] == list(range(1, 9))  # 2 samples x 4 epochs, 1 each
    assert [s.epoch for s in batches] == [1, 1, 2, 2, 3, 3, 4, 4]
    losses = list(done.epoch_losses)
    # It learned the samples: measured 2.65, 1.03, 0.39, 0.41 (two samples, shuffled, so
    # the last epochs wobble once the loss is low).
    assert len(losses) == 4 and max(losses[1:]) < losses[0] and losses[-1] < 0.5 * losses[0]
    assert done.done and done.checkpoint_step == 1 and job.sft.checkpoint_step == 1

    # GRPO ran after the whole phase, from its adapter: steps 1, 2 are checkpoints 2, 3.
    kinds = [e.kind for e in events]
    last_sft = max(i for i, k in enumerate(kinds) if k == pb.EVENT_KIND_SFT)
    assert last_sft < kinds.index(pb.EVENT_KIND_STEP_STARTED)
    assert [e.step for e in events if e.kind == pb.EVENT_KIND_STEP_DONE] == [1, 2]
    assert job.completed_steps == 2 and job.policy.endswith("@3")
    sft_adapter, grpo_adapter = _adapter(fleet, job, 1), _adapter(fleet, job, 2)
    lora_b = {k: v for k, v in sft_adapter.items() if "lora_B" in k}
    assert _norm(lora_b) > 0  # LoRA B starts at zero: SFT moved it
    delta = {k: grpo_adapter[k] - v for k, v in sft_adapter.items()}
    # Step 1 started from the SFT weights (a fresh adapter would be as far as they are).
    assert _norm(delta) < 0.5 * _norm(sft_adapter)
    # Step 1's rollouts were sampled by the SFT adapter (`name@1`), step 2's by step 1's.
    for step, version in ((1, 1), (2, 2)):
        files = sorted((fleet.workdir / "logs" / spec.experiment / f"step_{step}").glob("*.json"))
        assert len(files) == 2, files
        meta = [json.loads(f.read_text())["metadata"] for f in files]
        assert {(m["job_id"], m["policy_version"]) for m in meta} == {(job.id, version)}

    watched = subprocess.run(
        [sys.executable, "-m", "artfleet_cli.main", "jobs", "watch", job.id],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "ARTFLEET_TRAINER_TARGET": fleet.trainer_target,
            "ARTFLEET_API_TOKEN": fleet.token,
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # the sources under test
            "COLUMNS": "200",
        },
    )
    assert watched.returncode == 0, watched.stderr
    assert "sft epoch 1/4 batch 1/8: loss" in watched.stdout
    assert "sft done: 8 batches, checkpoint 1" in watched.stdout
    assert "sft: done, checkpoint 1, 2 samples per epoch" in watched.stdout
