"""Real jobs through the real fleet: redis-server, Celery worker, four gRPC services, the
real SmolLM2 model, on the session's shared torch fleet (`torch_fleet`: a fleet start is
the costly part; the fleet's own checks, clean exits, no container left and no secret in
a log, run when it stops). The jobs run one after another: a plain job, cancel, bad specs,
the token on every RPC, an asynchronous job and a code-fix job scored by its hidden tests.
The trainer restart has a fleet of its own (test_fleet_restart.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import redis
from fleet_jobs import checkpoint_dir, ran_together, submit_small, wait_event
from job_wait import wait_ended
from safetensors.torch import load_file

from artfleet.contracts.batches import StepKeys
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, rollout_pb2, sandbox_pb2, trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def fleet(torch_fleet: LocalFleet) -> LocalFleet:
    return torch_fleet


@pytest.fixture
def trainer(torch_trainer: trainer_pb2_grpc.TrainerStub) -> trainer_pb2_grpc.TrainerStub:
    return torch_trainer


def _run_to_end(
    trainer: trainer_pb2_grpc.TrainerStub, spec: JobSpecModel, *, timeout_s: float
) -> pb.Job:
    """Submits the job, follows it until its stream ends, and returns it as it ended."""
    job = trainer.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
    list(trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=timeout_s))
    return trainer.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))


def _lora_b_max(checkpoint: Path) -> float:
    weights = load_file(str(checkpoint / "adapter_model.safetensors"))
    return max(float(t.abs().max()) for k, t in weights.items() if "lora_B" in k)


def test_job_trains_end_to_end(fleet: LocalFleet, trainer: trainer_pb2_grpc.TrainerStub) -> None:
    job = submit_small(trainer, name="e2e", steps=2, lora_rank=4)
    # A second job of another rank at once: two tenants of the trainer's one base (one step
    # is enough to overlap: both start together).
    beside = submit_small(trainer, name="beside", steps=1, lora_rank=8)
    events = list(trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=1500))
    done_steps = [e.step for e in events if e.kind == pb.EVENT_KIND_STEP_DONE]
    assert done_steps == [1, 2]
    assert [e.seq for e in events] == sorted(e.seq for e in events)
    job = trainer.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert job.completed_steps == 2 and job.policy.endswith("@2")
    # LoRA B starts at zero: non-zero B in the checkpoints means training moved the weights.
    assert _lora_b_max(checkpoint_dir(fleet, job, 2)) > 0
    assert checkpoint_dir(fleet, job, 1).is_dir()
    adapter = json.loads((checkpoint_dir(fleet, job, 2) / "adapter_config.json").read_text())
    assert adapter["r"] == 4  # the job's lora_rank
    _assert_batches_scored(fleet, job)
    beside = wait_ended(trainer, beside.id, timeout_s=1500)
    assert beside.state == pb.JOB_STATE_SUCCEEDED, beside.error
    assert [s.step for s in beside.steps] == [1]
    beside_adapter = checkpoint_dir(fleet, beside, 1) / "adapter_config.json"
    assert json.loads(beside_adapter.read_text())["r"] == 8
    assert ran_together(trainer, job.id, beside.id)


def _assert_batches_scored(fleet: LocalFleet, job: pb.Job) -> None:
    """Each step's batch went once its checkpoint was saved; the step stays closed."""
    store = redis.Redis.from_url(fleet.redis_url)
    for step in (1, 2):
        keys = StepKeys(job.id, step)
        assert {k.decode() for k in store.scan_iter(match=keys.pattern)} == {keys.closed}


def test_cancel_stops_after_current_step(trainer: trainer_pb2_grpc.TrainerStub) -> None:
    job = submit_small(trainer, name="cancel", steps=20)
    events = trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=1500)
    wait_event(events, pb.EVENT_KIND_STEP_STARTED, 1)
    cancelled = trainer.CancelJob(trainer_pb2.CancelJobRequest(job_id=job.id))
    assert cancelled.state == pb.JOB_STATE_CANCELLING
    states = [e.state for e in events if e.kind == pb.EVENT_KIND_STATE]
    assert states[-1] == pb.JOB_STATE_CANCELLED
    job = trainer.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
    assert job.state == pb.JOB_STATE_CANCELLED
    assert job.completed_steps == 1  # the running step finished, no further step started


def test_invalid_spec_is_rejected_with_the_field(
    fleet: LocalFleet, trainer: trainer_pb2_grpc.TrainerStub
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        trainer.SubmitJob(trainer_pb2.SubmitJobRequest(spec=pb.JobSpec(steps=-1)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "steps" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        trainer.SubmitJob(trainer_pb2.SubmitJobRequest(spec=pb.JobSpec(environment="nope")))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "environment" in info.value.details()
    bad_reward = pb.RewardSpec(scorers=[pb.ScorerSpec(name="process"), pb.ScorerSpec(name="nope")])
    with pytest.raises(grpc.RpcError) as info:
        trainer.SubmitJob(trainer_pb2.SubmitJobRequest(spec=pb.JobSpec(reward=bad_reward)))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith("reward[1].name: unknown scorer 'nope'")
    cli = subprocess.run(
        [sys.executable, "-m", "artfleet_cli.main", "jobs", "submit", "--env", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "ARTFLEET_TRAINER_TARGET": fleet.trainer_target,
            "ARTFLEET_API_TOKEN": fleet.token,
            "PATH": "/usr/bin:/bin",
        },
    )
    assert cli.returncode == 2, cli.stderr
    assert "environment" in cli.stderr and "Traceback" not in cli.stderr


SERVICES = {
    "trainer": trainer_pb2,
    "rollout": rollout_pb2,
    "sandbox": sandbox_pb2,
    "reward": reward_pb2,
}


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_every_rpc_requires_the_token(fleet: LocalFleet, token: str | None) -> None:
    from google.protobuf import message_factory
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    metadata = None if token is None else (("authorization", f"Bearer {token}"),)
    for name, module in SERVICES.items():
        (service,) = module.DESCRIPTOR.services_by_name.values()
        full_name = service.full_name
        with grpc.insecure_channel(f"127.0.0.1:{fleet.ports[name]}") as channel:
            for method in service.methods:
                request_cls = message_factory.GetMessageClass(method.input_type)
                path = f"/{full_name}/{method.name}"
                if method.server_streaming:
                    call = channel.unary_stream(path, request_cls.SerializeToString, lambda b: b)
                    with pytest.raises(grpc.RpcError) as info:
                        list(call(request_cls(), metadata=metadata, timeout=10))
                else:
                    call = channel.unary_unary(path, request_cls.SerializeToString, lambda b: b)
                    with pytest.raises(grpc.RpcError) as info:
                        call(request_cls(), metadata=metadata, timeout=10)
                assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, path
            # Health is the one exception: probes carry no secret.
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


# -- more kinds of job on the same fleet ---------------------------------------------------


def test_an_async_job_succeeds_at_most_one_version_stale(
    trainer: trainer_pb2_grpc.TrainerStub,
) -> None:
    """max_steps_off_policy=1: a step may be sampled one policy version behind."""
    spec = JobSpecModel.model_validate(
        dict(
            name="async",
            steps=2,
            groups_per_step=2,
            rollouts_per_group=2,
            max_turns=2,
            max_tokens=32,
            learning_rate=1e-4,
            max_steps_off_policy=1,
        )
    )
    job = _run_to_end(trainer, spec, timeout_s=1500)
    assert job.state == pb.JOB_STATE_SUCCEEDED, job.error
    assert [s.step for s in job.steps] == [1, 2]
    assert all(s.staleness_max <= 1 for s in job.steps)
    # Step 2 was dispatched with step 1: sampled by policy 0 (one behind) unless its
    # requests waited for step 1's training (one torch thread), then by policy 1.
    assert job.steps[1].staleness_max in (0, 1)
    assert all(s.trainer_idle_seconds >= 0 and s.step_seconds > 0 for s in job.steps)


GROUP_METRICS = ("f2p_passed", "f2p_failed", "p2p_passed", "p2p_failed")


def test_code_fix_job_with_the_tests_scorer(
    fleet: LocalFleet, trainer: trainer_pb2_grpc.TrainerStub
) -> None:
    """The terminal agent works in the buggy project, the hidden F2P/P2P tests run after
    each episode, the `tests` scorer rewards them, and every logged trajectory carries the
    per-group counts."""
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
    job = _run_to_end(trainer, spec, timeout_s=1800)
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
