"""A trainer service of several ranks under test (tests/integration/trainer/
test_trainer_ranks_*.py): waiting for it to serve, and a Tinker-compatible client trained
through it (its forward_backward and optim_step run on every rank)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import grpc

from artfleet.contracts.base_models import DEFAULT_MODEL_NAME
from artfleet.runtime.rpc.client import sync_channel
from artfleet.v1 import tinker_api_pb2 as pb
from artfleet.v1 import tinker_api_pb2_grpc as pb_grpc
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc

TOKEN = "ranks-test-token-0123456789abcdef"
START_S, CALL_S, STOP_S = 600.0, 600.0, 120.0


def wait_serving(target: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_S
    stub = trainer_pb2_grpc.TrainerStub(sync_channel(target, TOKEN))
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the trainer exited:\n{log.read_text()[-4000:]}"
        try:
            stub.Describe(trainer_pb2.DescribeTrainerRequest(), timeout=5)
            return
        except grpc.RpcError:
            time.sleep(0.5)  # polling a starting server, not waiting out a race
    raise AssertionError(f"the trainer did not serve in {START_S:.0f} s")


def result(stub: pb_grpc.TinkerApiStub, promise: pb.Promise) -> pb.RetrieveResponse:
    deadline = time.monotonic() + CALL_S
    while time.monotonic() < deadline:
        got = stub.Retrieve(
            pb.RetrieveRequest(request_id=promise.request_id, wait_s=30), timeout=60
        )
        if got.WhichOneof("outcome") != "pending":
            assert got.WhichOneof("outcome") != "failure", got.failure.message
            return got
    raise AssertionError("the call did not finish")


def failure_of(stub: pb_grpc.TinkerApiStub, promise: pb.Promise) -> pb.Failure:
    """The failure a call ends in, waiting through the service's restart: the failure it
    was given before rank 0 stopped, or (the answer lost with the stopped service) the
    restarted one's `lost` failure for it."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        try:
            got = stub.Retrieve(
                pb.RetrieveRequest(request_id=promise.request_id, wait_s=30), timeout=60
            )
        except grpc.RpcError:  # the service is stopping or starting again
            time.sleep(0.5)  # polling for the restarted service
            continue
        if got.WhichOneof("outcome") != "pending":
            assert got.WhichOneof("outcome") == "failure", got
            return got.failure
    raise AssertionError("the call neither failed nor was lost")


def new_client(stub: pb_grpc.TinkerApiStub) -> str:
    """A new training client (a LoRA on the base); its model id."""
    session = stub.CreateSession(pb.CreateTrainingSessionRequest(), timeout=30).session_id
    create = pb.CreateModelOp(
        model_seq_id=0,
        base_model=DEFAULT_MODEL_NAME,
        rank=8,
        seed=5,
        train_mlp=True,
        train_attn=True,
    )
    made = result(stub, stub.Submit(pb.TrainingCall(session_id=session, create_model=create)))
    return made.create_model.model_id


def long_forward_backward(stub: pb_grpc.TinkerApiStub, model: str) -> pb.Promise:
    """A forward_backward of 6 datums of 1,000 tokens (seconds of work on each rank)."""
    data = [
        pb.Datum(tokens=list(range(10 + i, 1010 + i)), target_tokens=list(range(11 + i, 1011 + i)))
        for i in range(6)
    ]
    fb = pb.ForwardBackwardOp(data=data, loss_fn="cross_entropy")
    return stub.Submit(pb.TrainingCall(model_id=model, seq_id=1, forward_backward=fb))


def train_a_client(stub: pb_grpc.TinkerApiStub) -> None:
    """A new client's forward_backward and optim_step, on every rank."""
    model = new_client(stub)
    data = [
        pb.Datum(tokens=list(range(10 + i, 40 + i)), target_tokens=list(range(11 + i, 41 + i)))
        for i in range(3)
    ]
    fb = pb.ForwardBackwardOp(data=data, loss_fn="cross_entropy")
    passed = result(
        stub, stub.Submit(pb.TrainingCall(model_id=model, seq_id=1, forward_backward=fb))
    )
    assert [len(lp.values) for lp in passed.forward_backward.logprobs] == [30, 30, 30]
    step = pb.OptimStepOp(adam=pb.AdamParams(learning_rate=1e-3, beta1=0.9, beta2=0.95, eps=1e-8))
    stepped = result(stub, stub.Submit(pb.TrainingCall(model_id=model, seq_id=2, optim_step=step)))
    assert stepped.optim_step.metrics["grad_norm:mean"] > 0


def rank_pids(launcher: subprocess.Popen[bytes]) -> dict[int, int]:
    """rank -> pid of the launcher's rank processes (torchrun's children)."""
    found = {}
    for child in Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split():
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:  # it ended meanwhile (ProcessLookupError)
            continue
        for item in environ:
            if item.startswith(b"RANK="):
                found[int(item[5:])] = int(child)
    return found


def kill_launcher(launcher: subprocess.Popen[bytes]) -> None:
    """SIGKILL a launcher still running, and its ranks: torchrun starts each rank in a
    session of its own, which outlives a kill of the launcher's."""
    if launcher.poll() is not None:
        return
    ranks = rank_pids(launcher)
    os.killpg(launcher.pid, signal.SIGKILL)
    launcher.wait()
    for pid in ranks.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
