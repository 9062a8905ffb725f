"""`artfleet eval run`'s task loop: it stops early, cancelling what is left, once the first
tasks all failed every sample with one error, and runs every task otherwise (futures of
our own RunGroup answers; the gRPC path is tests/integration/cli/test_eval_cli.py)."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_cli.evals import EARLY_STOP_TASKS, run_tasks


def _failed(message: str) -> rollout_pb2.RunGroupResponse:
    response = rollout_pb2.RunGroupResponse()
    for _ in range(2):
        response.group.exceptions.add(type="NotFoundError", message=message)
    return response


def _ok() -> rollout_pb2.RunGroupResponse:
    response = rollout_pb2.RunGroupResponse()
    response.group.trajectories.add(reward=1.0)
    response.episodes.add(turns=1)
    return response


class Starts:
    """Answers each started task at once; keeps the futures it handed out."""

    def __init__(self, answer: dict[str, rollout_pb2.RunGroupResponse]) -> None:
        self.answer = answer
        self.started: list[str] = []

    def __call__(self, scenario: str) -> Future[rollout_pb2.RunGroupResponse]:
        self.started.append(scenario)
        future: Future[rollout_pb2.RunGroupResponse] = Future()
        future.set_result(self.answer[scenario])
        return future


def test_the_same_error_on_the_first_tasks_stops_the_eval_with_exit_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenarios = [f"t{i}" for i in range(10)]
    starts = Starts({s: _failed("model 'x@9' is not served") for s in scenarios})
    with pytest.raises(SystemExit) as exit_:
        run_tasks(starts, scenarios, concurrency=1)
    assert exit_.value.code == 1
    assert len(starts.started) == EARLY_STOP_TASKS  # the other 7 never ran
    err = capsys.readouterr().err
    assert f"stopped after {EARLY_STOP_TASKS} of 10 tasks" in err
    assert "NotFoundError: model 'x@9' is not served" in err


def test_different_errors_or_a_sample_run_every_task() -> None:
    scenarios = [f"t{i}" for i in range(6)]
    answers = {s: _failed(f"timeout on {s}") for s in scenarios}
    answers["t1"] = _ok()
    starts = Starts(answers)
    responses = run_tasks(starts, scenarios, concurrency=2)
    assert list(responses) == scenarios and starts.started == scenarios
    assert pb.Trajectory(reward=1.0) == responses["t1"].group.trajectories[0]
