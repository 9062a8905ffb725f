"""`artfleet eval run` as a user runs it, its output to a file (no terminal), before a
fake Rollout service (a gRPC server of our own: 5 tasks, the first 2 answer, the rest run
until cancelled): a progress line per finished task on stderr, and on SIGINT or SIGTERM
the finished tasks written to --out as partial results (partial.json), exit 128+signal,
the tasks still running cancelled. The task loop alone: test_eval_run_tasks.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from typer.testing import CliRunner
from waiting import wait_for

from artfleet.contracts.evaluation import SUCCESS_METRIC
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc
from artfleet_cli.main import app

TOKEN = "eval-stop-token"
TASKS = [f"t{i}" for i in range(5)]
ANSWERED = {"t0": [True, False], "t1": [False, False]}  # the rest never answer


class FakeRollout(rollout_pb2_grpc.RolloutServicer):
    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.lock = threading.Lock()

    def DescribeEnvironment(self, request: Any, context: Any) -> Any:
        info = rollout_pb2.EnvironmentInfo(name=request.name, agent="terminal")
        for task in TASKS:
            info.scenarios.add(id=task, split="test")
        return info

    def CheckPolicy(self, request: Any, context: Any) -> Any:
        return rollout_pb2.CheckPolicyResponse(
            reachable=True, authorized=True, served=True, served_as=request.policy
        )

    def RunGroup(self, request: Any, context: Any) -> Any:
        scenario = request.task.scenario_id
        if scenario in ANSWERED:
            response = rollout_pb2.RunGroupResponse()
            for passed in ANSWERED[scenario]:
                trajectory = response.group.trajectories.add(reward=float(passed))
                trajectory.metrics[SUCCESS_METRIC].bool_value = passed
                response.episodes.add(turns=1)
            return response
        gone = threading.Event()
        context.add_callback(gone.set)  # the client cancelled, or went away
        gone.wait()
        with self.lock:
            self.cancelled.append(scenario)
        return rollout_pb2.RunGroupResponse()


@pytest.fixture
def rollout() -> Iterator[tuple[str, FakeRollout]]:
    servicer = FakeRollout()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    rollout_pb2_grpc.add_RolloutServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_eval_keeps_its_finished_tasks_as_partial_results(
    rollout: tuple[str, FakeRollout], tmp_path: Path, signum: signal.Signals
) -> None:
    target, servicer = rollout
    out = tmp_path / "evals" / "base"
    cmd = [
        *(sys.executable, "-m", "artfleet_cli.main", "eval", "run", "--target", target),
        *("--base-url", "http://127.0.0.1:1/v1", "--model", "base", "--env", "fake"),
        *("--split", "test", "--k", "2", "--concurrency", "2", "--out", str(out)),
    ]
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    with stdout.open("wb") as out_sink, stderr.open("wb") as err_sink:
        proc = subprocess.Popen(
            cmd, stdout=out_sink, stderr=err_sink, env={**os.environ, "ARTFLEET_API_TOKEN": TOKEN}
        )
    try:
        wait_for(  # progress while it runs: the two tasks that answer, then the wait
            "eval run's progress lines (or its exit)",
            lambda: "eval: 2/5 tasks" in stderr.read_text() or proc.poll() is not None,
            timeout_s=120,
        )
        progress = stderr.read_text()
        assert proc.poll() is None, progress
        assert "eval: 1/5 tasks · t0: 2/2 samples, 1 succeeded" in progress
        assert "eval: 2/5 tasks · t1: 2/2 samples, 0 succeeded" in progress
        proc.send_signal(signum)
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = stderr.read_text()
    assert code == 128 + signum, err
    assert "Traceback" not in err
    assert f"stopped by {signum.name}: partial results, 2 of 5 tasks, written to {out}" in err
    summary = json.loads((out / "summary.json").read_text())
    assert [r["scenario_id"] for r in summary["results"]] == ["t0", "t1"]
    assert summary["tasks"] == 2 and summary["success_rate"] == 0.25
    assert len(list((out / "trajectories").iterdir())) == 4
    partial = json.loads((out / "partial.json").read_text())
    assert partial == {
        "partial": True,
        "stopped_by": signum.name,
        "tasks_done": 2,
        "tasks_total": 5,
        "not_done": ["t2", "t3", "t4"],
    }
    assert "pass@2" in stdout.read_text()  # the partial table, to its output
    # The tasks still running were cancelled, not left to run on.
    wait_for("the running tasks cancelled", lambda: sorted(servicer.cancelled) == ["t2", "t3"])
    compared = CliRunner().invoke(app, ["eval", "compare", str(out), str(out)])
    assert compared.exit_code == 0, compared.output
    assert f"note: {out} is partial: 2 of 5 tasks (stopped by {signum.name})" in compared.stderr


def test_a_whole_run_after_a_stopped_one_is_no_longer_marked_partial(
    rollout: tuple[str, FakeRollout], tmp_path: Path
) -> None:
    target, _ = rollout
    out = tmp_path / "base"
    out.mkdir()
    (out / "partial.json").write_text("{}")  # from a run stopped before
    args = ["eval", "run", "--target", target, "--base-url", "http://127.0.0.1:1/v1"]
    args += ["--model", "base", "--env", "fake", "--split", "test", "--k", "2"]
    args += ["--max-tasks", "2", "--out", str(out)]
    result = CliRunner().invoke(app, args, env={"ARTFLEET_API_TOKEN": TOKEN})
    assert result.exit_code == 0, result.output
    assert not (out / "partial.json").exists()
    # not a terminal here: plain lines; the tasks run side by side, so either ends last
    assert re.search(r"eval: 2/2 tasks · t[01]: 2/2 samples", result.stderr), result.stderr
    assert json.loads((out / "summary.json").read_text())["tasks"] == 2
