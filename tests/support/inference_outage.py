"""Inference outages on a local fleet with the vLLM engine, as a user meets them: the fleet
stopped mid-job and started again with the inference service held back (it answers long
after the trainer resumed the job), and the inference process group SIGKILLed mid-step and
started again late. The delay is injected into the inference process itself (`sleep`, then
`exec` the service), so every other part runs exactly as `fleet up` runs it.

Used by tests/integration/inference/test_vllm_fleet_slow.py (the kill, CI-sized) and by
`bench/chaos_bench.py --inference` (both cases, repeated, with the recovery figures).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from job_wait import wait_ended
from waiting import poll

from artfleet.contracts.batches import StepKeys
from artfleet.runtime.rpc.client import sync_channel
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet

# A small job: a step is seconds of rollouts on vLLM; the outage lands in step 2, the last.
STEPS, GROUPS, ROLLOUTS = 2, 2, 2
JOB: dict[str, Any] = dict(
    steps=STEPS, groups_per_step=GROUPS, rollouts_per_group=ROLLOUTS, max_turns=2, max_tokens=32,
    learning_rate=1e-3, lora_rank=4, environment="shell-tasks",
    reward=[{"name": "process"}, {"name": "task_check"}],
)  # fmt: skip
# Today's retries on the policy give up after about a minute; the fleet here retries for
# seconds, so a short hold is already "longer than the retries".
SETTINGS = {"ARTFLEET_MODEL_RETRIES": "2"}


@dataclass
class HeldBackFleet(LocalFleet):
    """A LocalFleet whose inference service starts `hold_s` late."""

    hold_s: float = 0.0

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], grpc_port: int = 0) -> None:
        if name == "inference" and self.hold_s > 0:
            cmd = ["sh", "-c", f'sleep {self.hold_s:g} && exec "$@"', "held-back", *cmd]
        super()._spawn(name, cmd, env, grpc_port)

    def kill_inference(self, name: str = "inference") -> None:
        """SIGKILL to the inference replica `name` and every process under it, as a
        container's death takes them all: vLLM runs in a session of its own, which a kill
        of the service's group alone would leave running (holding its memory and cores)."""
        process = next(p for p in self.processes if p.name == name)
        tree = descendants(process.proc.pid)
        for pid in (process.proc.pid, *tree):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.proc.wait(30)
        self.processes.remove(process)

    def start_inference_late(self, hold_s: float, timeout_s: float = 900) -> None:
        """Starts the inference service `hold_s` late; returns once it serves."""
        self.hold_s = hold_s
        self.start_inference("inference")
        self._wait_policy(time.monotonic() + timeout_s, "inference")


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (children first found, depth-first), from /proc."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                found.append(int(child))
                found.extend(descendants(int(child)))
    return found


def new_fleet(workdir: Path, **fields: Any) -> HeldBackFleet:
    settings = {**SETTINGS, **fields.pop("settings", {})}
    return HeldBackFleet(workdir, engine="vllm", api=False, settings=settings, **fields)


def restarted(fleet: HeldBackFleet, hold_s: float) -> HeldBackFleet:
    """The same fleet (workdir, ports, token, Redis password) as a new `fleet up`."""
    return new_fleet(
        fleet.workdir,
        token=fleet.token,
        ports=dict(fleet.ports),
        redis_password=fleet.redis_password,
        hold_s=hold_s,
    )


def trainer_stub(fleet: LocalFleet) -> trainer_pb2_grpc.TrainerStub:
    return trainer_pb2_grpc.TrainerStub(sync_channel(fleet.trainer_target, fleet.token))


def submit(fleet: LocalFleet, seed: int = 1) -> str:
    spec = JobSpecModel.model_validate({**JOB, "name": "outage", "seed": seed})
    request = trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec))
    return str(trainer_stub(fleet).SubmitJob(request, timeout=120).id)


def wait_step_running(fleet: LocalFleet, job_id: str, step: int, timeout_s: float) -> None:
    """Until a group of `step` is claimed by a worker (its episodes are under way)."""
    client = redis.Redis.from_url(fleet.redis_url)
    try:
        claims = StepKeys(job_id, step).claims
        if not poll(lambda: client.hlen(claims) > 0, timeout_s=timeout_s, interval_s=0.2):
            raise TimeoutError(f"no group of step {step} was claimed in {timeout_s:.0f}s")
    finally:
        client.close()


@dataclass
class OutageRun:
    case: str
    job: pb.Job
    # From the inference service serving again to the step moving (a group of the
    # interrupted step answered, or the step done); None if neither happened.
    recovery_s: float | None
    expected_per_step: int = GROUPS * ROLLOUTS

    @property
    def lost_trajectories(self) -> int:
        return sum(max(0, self.expected_per_step - s.trajectories) for s in self.job.steps)

    @property
    def duplicate_steps(self) -> int:
        steps = [s.step for s in self.job.steps]
        return len(steps) - len(set(steps))

    @property
    def ok(self) -> bool:
        return (
            self.job.state == pb.JOB_STATE_SUCCEEDED
            and [s.step for s in self.job.steps] == list(range(1, STEPS + 1))
            and self.lost_trajectories == 0
        )


def step_moving(fleet: LocalFleet, job_id: str, step: int, timeout_s: float) -> float | None:
    """Seconds until a group of `step` is answered or the job completes `step`, from now."""
    start = time.monotonic()
    client = redis.Redis.from_url(fleet.redis_url)
    stub = trainer_stub(fleet)
    status = StepKeys(job_id, step).status

    def moved() -> bool:
        job = stub.GetJob(trainer_pb2.GetJobRequest(job_id=job_id), timeout=30)
        return job.completed_steps >= step or client.hlen(status) > answered

    try:
        answered = client.hlen(status)
        if not poll(moved, timeout_s=timeout_s, interval_s=0.2):
            return None
    finally:
        client.close()
    return time.monotonic() - start


def kill_mid_step(fleet: HeldBackFleet, hold_s: float, timeout_s: float = 1800) -> OutageRun:
    """The inference service SIGKILLed while step 2's episodes run, started `hold_s` late."""
    job_id = submit(fleet)
    wait_step_running(fleet, job_id, 2, timeout_s)
    fleet.kill_inference()
    fleet.start_inference_late(hold_s)
    recovery = step_moving(fleet, job_id, 2, timeout_s)
    job = wait_ended(trainer_stub(fleet), job_id, timeout_s)
    return OutageRun("kill", job, recovery)


def restart_mid_job(
    fleet: HeldBackFleet, hold_s: float, log: Callable[[str], None], timeout_s: float = 1800
) -> tuple[OutageRun, HeldBackFleet]:
    """The whole fleet stopped (as Ctrl-C stops `fleet up`) while step 2 runs, then started
    again with the inference service `hold_s` late; returns the run and the new fleet."""
    job_id = submit(fleet)
    wait_step_running(fleet, job_id, 2, timeout_s)
    fleet.stop()
    log(f"fleet stopped mid-step; starting it again, inference {hold_s:g}s late")
    again = restarted(fleet, hold_s)
    again.start(timeout_s=hold_s + 900)  # returns once the policy is served
    recovery = step_moving(again, job_id, 2, timeout_s)
    job = wait_ended(trainer_stub(again), job_id, timeout_s)
    return OutageRun("restart", job, recovery), again


if __name__ == "__main__":  # pragma: no cover - a manual check
    sys.exit("use bench/chaos_bench.py --inference")
