"""The trainer service on 2 ranks, started as users start it: `python -m artfleet_trainer`
with ARTFLEET_TRAIN_WORLD=2 runs torchrun, rank 0 serves gRPC and rank 1 follows it. A
Tinker-compatible client's forward_backward and optim_step go through the service and run
on both ranks; a SIGTERM stops the group cleanly (rank 0 tells rank 1 to leave).

The policy is served by the inference service in a fleet of ranks; none runs here, since
these calls sample nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from artfleet.contracts.base_models import DEFAULT_MODEL_NAME
from artfleet.runtime.ports import PortHold
from artfleet.runtime.rpc.client import sync_channel
from artfleet.v1 import tinker_api_pb2 as pb
from artfleet.v1 import tinker_api_pb2_grpc as pb_grpc
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc

TOKEN = "ranks-test-token-0123456789abcdef"
START_S, CALL_S, STOP_S = 600.0, 600.0, 120.0


@pytest.fixture
def trainer_on_two_ranks(redis_url: str, tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    ports = PortHold()
    grpc_port, metrics_port, master, dead = (ports.pick() for _ in range(4))
    env = {
        **os.environ,
        "ARTFLEET_API_TOKEN": TOKEN,
        "ARTFLEET_REDIS_URL": redis_url,
        "ARTFLEET_PORT": str(grpc_port),
        "ARTFLEET_METRICS_PORT": str(metrics_port),
        "ARTFLEET_ART_PATH": str(tmp_path / "art"),
        "ARTFLEET_TRAJECTORY_LOG_DIR": str(tmp_path / "logs"),
        "ARTFLEET_BACKEND": "torch",
        "ARTFLEET_INFERENCE_ENGINE": "vllm",
        "ARTFLEET_INFERENCE_URL": f"http://127.0.0.1:{dead}",  # held: nothing answers
        "ARTFLEET_TRAIN_WORLD": "2",
        "ARTFLEET_TRAIN_MASTER_PORT": str(master),
        "ARTFLEET_TRAIN_COLLECTIVE_TIMEOUT_S": "300",
    }
    log = tmp_path / "trainer.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "artfleet_trainer"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_serving(f"127.0.0.1:{grpc_port}", process, log)
        yield (process, f"127.0.0.1:{grpc_port}"), log
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        ports.release()


def _wait_serving(target: str, process: subprocess.Popen[bytes], log: Path) -> None:
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


def _result(stub: pb_grpc.TinkerApiStub, promise: pb.Promise) -> pb.RetrieveResponse:
    deadline = time.monotonic() + CALL_S
    while time.monotonic() < deadline:
        got = stub.Retrieve(
            pb.RetrieveRequest(request_id=promise.request_id, wait_s=30), timeout=60
        )
        if got.WhichOneof("outcome") != "pending":
            assert got.WhichOneof("outcome") != "failure", got.failure.message
            return got
    raise AssertionError("the call did not finish")


def _train_a_client(stub: pb_grpc.TinkerApiStub) -> None:
    """A new client's forward_backward and optim_step, on every rank."""
    session = stub.CreateSession(pb.CreateTrainingSessionRequest(), timeout=30).session_id
    create = pb.CreateModelOp(
        model_seq_id=0,
        base_model=DEFAULT_MODEL_NAME,
        rank=8,
        seed=5,
        train_mlp=True,
        train_attn=True,
    )
    made = _result(stub, stub.Submit(pb.TrainingCall(session_id=session, create_model=create)))
    model = made.create_model.model_id
    data = [
        pb.Datum(tokens=list(range(10 + i, 40 + i)), target_tokens=list(range(11 + i, 41 + i)))
        for i in range(3)
    ]
    fb = pb.ForwardBackwardOp(data=data, loss_fn="cross_entropy")
    passed = _result(
        stub, stub.Submit(pb.TrainingCall(model_id=model, seq_id=1, forward_backward=fb))
    )
    assert [len(lp.values) for lp in passed.forward_backward.logprobs] == [30, 30, 30]
    step = pb.OptimStepOp(adam=pb.AdamParams(learning_rate=1e-3, beta1=0.9, beta2=0.95, eps=1e-8))
    stepped = _result(stub, stub.Submit(pb.TrainingCall(model_id=model, seq_id=2, optim_step=step)))
    assert stepped.optim_step.metrics["grad_norm:mean"] > 0


def _ranks(launcher: subprocess.Popen[bytes]) -> dict[int, int]:
    """rank -> pid of the launcher's rank processes (torchrun's children)."""
    found = {}
    for child in Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split():
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except FileNotFoundError:
            continue  # it ended meanwhile
        for item in environ:
            if item.startswith(b"RANK="):
                found[int(item[5:])] = int(child)
    return found


def test_a_trainer_of_two_ranks_trains_a_tinker_client_and_stops_cleanly(
    trainer_on_two_ranks: tuple[Any, Path],
) -> None:
    (process, target), log = trainer_on_two_ranks
    _train_a_client(pb_grpc.TinkerApiStub(sync_channel(target, TOKEN)))

    process.send_signal(signal.SIGTERM)  # torchrun's agent passes it to both ranks
    assert process.wait(timeout=STOP_S) == 0  # a stop, not a failure
    text = log.read_text()
    assert "rank 1: rank 0 stopped the group" in text, text[-4000:]
    assert "Traceback" not in text, text[-4000:]


def test_a_killed_rank_restarts_the_group_which_trains_again(
    trainer_on_two_ranks: tuple[Any, Path],
) -> None:
    """torchrun sees rank 1 die, ends rank 0 (its graceful stop: jobs go back to the queue
    by their lease) and starts both again; the restarted service trains."""
    (process, target), log = trainer_on_two_ranks
    before = _ranks(process)
    assert set(before) == {0, 1}, before
    os.kill(before[1], signal.SIGKILL)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        now = _ranks(process)
        if set(now) == {0, 1} and not set(now.values()) & set(before.values()):
            break
        assert process.poll() is None, f"the group did not restart:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)  # polling for the restarted ranks
    else:
        raise AssertionError("the ranks were not started again")
    _wait_serving(target, process, log)
    _train_a_client(pb_grpc.TinkerApiStub(sync_channel(target, TOKEN)))
    text = log.read_text()
    assert "failed (exitcode: -9)" in text  # torchrun saw rank 1 die
    assert "Traceback" not in text, text[-4000:]  # rank 0 stopped, not crashed
