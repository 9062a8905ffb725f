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

import pytest
from trainer_ranks import (
    START_S,
    STOP_S,
    TOKEN,
    failure_of,
    kill_launcher,
    long_forward_backward,
    new_client,
    rank_pids,
    train_a_client,
    wait_serving,
)
from waiting import wait_for

from artfleet.runtime.ports import PortHold
from artfleet.runtime.rpc.client import sync_channel
from artfleet.v1 import tinker_api_pb2_grpc as pb_grpc

COLLECTIVE_TIMEOUT_S = 300


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
        "ARTFLEET_TRAIN_COLLECTIVE_TIMEOUT_S": str(COLLECTIVE_TIMEOUT_S),
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
        wait_serving(f"127.0.0.1:{grpc_port}", process, log)
        yield (process, f"127.0.0.1:{grpc_port}"), log
    finally:
        kill_launcher(process)
        ports.release()


def test_a_trainer_of_two_ranks_trains_a_tinker_client_and_stops_cleanly(
    trainer_on_two_ranks: tuple[Any, Path],
) -> None:
    (process, target), log = trainer_on_two_ranks
    train_a_client(pb_grpc.TinkerApiStub(sync_channel(target, TOKEN)))

    process.send_signal(signal.SIGTERM)  # torchrun's agent passes it to both ranks
    assert process.wait(timeout=STOP_S) == 0  # a stop, not a failure
    text = log.read_text()
    assert "rank 1: rank 0 stopped the group" in text, text[-4000:]
    assert "Traceback" not in text, text[-4000:]


def test_a_rank_killed_mid_call_fails_the_call_and_the_group_restarts_and_trains(
    trainer_on_two_ranks: tuple[Any, Path],
) -> None:
    """Rank 1 is SIGKILLed while it runs its share of a forward_backward: the call fails
    (rank 0's collective raises at the dead peer; nothing waits out the collective
    timeout), torchrun ends rank 0 (its graceful stop: jobs go back to the queue by their
    lease) and starts both again; the restarted service trains."""
    (process, target), log = trainer_on_two_ranks
    stub = pb_grpc.TinkerApiStub(sync_channel(target, TOKEN))
    model = new_client(stub)
    before = rank_pids(process)
    assert set(before) == {0, 1}, before
    promise = long_forward_backward(stub, model)
    wait_for("rank 1 running the call", lambda: "rank 1 runs datums" in log.read_text(), START_S)
    started = time.monotonic()
    os.kill(before[1], signal.SIGKILL)
    failure = failure_of(stub, promise)
    assert failure.category == "server", failure
    assert time.monotonic() - started < COLLECTIVE_TIMEOUT_S, "it waited out the timeout"
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        now = rank_pids(process)
        if set(now) == {0, 1} and not set(now.values()) & set(before.values()):
            break
        assert process.poll() is None, f"the group did not restart:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)  # polling for the restarted ranks
    else:
        raise AssertionError("the ranks were not started again")
    wait_serving(target, process, log)
    train_a_client(pb_grpc.TinkerApiStub(sync_channel(target, TOKEN)))
    process.send_signal(signal.SIGTERM)  # and the restarted group stops cleanly
    assert process.wait(timeout=STOP_S) == 0
    text = log.read_text()
    assert "failed (exitcode: -9)" in text  # torchrun saw rank 1 die
    assert "Traceback" not in text, text[-4000:]  # rank 0 stopped, not crashed
