"""A step's scorer errors reach every client: the job body, the SSE stream's step events
(with the message), and `artfleet jobs status`; a rollout's reward outcome; the policy
judge's candidates."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from rich.console import Console

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2
from artfleet_api.mapping import checkpoints_out, job_out, outcome_out, policy_judge_candidates
from artfleet_api.sse import job_events
from artfleet_cli import render

ERROR = "ruler: invalid_output: ContextWindowExceededError: maximum context length is 2048"


def _summary(step: int = 2) -> pb.StepSummary:
    return pb.StepSummary(
        step=step, trajectories=8, scorer_errors=2, scorer_error=ERROR, scoring_failed=True
    )


class _Call:
    """A WatchJob call: the events, then the end of the stream."""

    def __init__(
        self, events: list[pb.ProgressEvent], error: grpc.StatusCode | None = None
    ) -> None:
        self._events = events
        self._error = error

    def __aiter__(self) -> AsyncIterator[pb.ProgressEvent]:
        async def gen() -> AsyncIterator[pb.ProgressEvent]:
            for event in self._events:
                yield event
            if self._error is not None:
                empty = grpc.aio.Metadata()
                raise grpc.aio.AioRpcError(self._error, empty, empty, details="Redis is away")

        return gen()

    def cancel(self) -> None:
        pass


class _Trainer:
    def __init__(self, events: list[pb.ProgressEvent]) -> None:
        self.events = events

    def WatchJob(self, request: trainer_pb2.WatchJobRequest) -> _Call:
        return _Call(self.events)


async def test_the_sse_step_event_carries_the_scorer_errors() -> None:
    event = pb.ProgressEvent(seq=5, kind=pb.EVENT_KIND_STEP_DONE, step=2, summary=_summary())
    chunks = [c async for c in job_events(_Trainer([event]), "j1", 0)]  # type: ignore[arg-type]
    assert len(chunks) == 1
    data = json.loads(chunks[0].decode().split("data: ", 1)[1])
    summary = data["summary"]
    assert (summary["scorer_errors"], summary["scoring_failed"]) == (2, True)
    assert summary["scorer_error"] == ERROR


def test_the_job_body_has_each_steps_scorer_errors_and_zero_when_none() -> None:
    job = pb.Job(id="j1")
    job.steps.extend([pb.StepSummary(step=1), _summary()])
    steps = job_out(job).steps
    assert [(s.scorer_errors, s.scorer_error, s.scoring_failed) for s in steps] == [
        (0, "", False),
        (2, ERROR, True),
    ]


def test_jobs_status_shows_the_scorer_errors_with_their_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(render, "console", Console(width=240, highlight=False))
    job = pb.Job(id="j1", state=pb.JOB_STATE_RUNNING)
    job.steps.extend([pb.StepSummary(step=1), _summary()])
    with render.console.capture() as captured:
        render.job_details(job)
    text = captured.get()
    assert "scorer errors" in text and "2 (all)" in text
    assert f"step 2: scorer errors in 2 groups, every group lost: SCORING FAILED ({ERROR})" in text
    assert render.step_line(_summary()).endswith(f"SCORING FAILED ({ERROR})")
    assert "scorer errors" not in render.step_line(pb.StepSummary(step=1))


def test_checkpoints_name_their_training_step_past_an_sft_adapter() -> None:
    job = pb.Job(id="j1", sft=pb.SftStatus(done=True, checkpoint_step=1))
    info = trainer_pb2.ModelInfo(name="agent-j1")
    for step in (0, 1, 3):
        info.checkpoints.add(step=step, best=step == 3)
    out = checkpoints_out(job, info)
    assert [(c.step, c.training_step, c.policy, c.best) for c in out] == [
        (0, None, "agent-j1@0", False),
        (1, None, "agent-j1@1", False),
        (3, 2, "agent-j1@3", True),
    ]


def _job(job_id: str, state: Any, policy: str, name: str = "agent") -> pb.Job:
    job = pb.Job(id=job_id, state=state, policy=policy)
    job.spec.project, job.spec.name = "p", name
    return job


def test_the_policy_judge_is_never_a_failed_jobs_checkpoint() -> None:
    jobs = [  # newest first, as ListJobs answers
        _job("j4", pb.JOB_STATE_FAILED, "agent-j4@2"),
        _job("j3", pb.JOB_STATE_QUEUED, ""),
        _job("j2", pb.JOB_STATE_SUCCEEDED, "other-j2@5", name="other"),
        _job("j1", pb.JOB_STATE_CANCELLED, "agent-j1@3"),
    ]
    assert [j.policy for j in policy_judge_candidates(jobs, None, None)] == [
        "other-j2@5",
        "agent-j1@3",
    ]
    assert [j.policy for j in policy_judge_candidates(jobs, "p", "agent")] == ["agent-j1@3"]
    assert policy_judge_candidates(jobs[:1], "p", "agent") == []


def test_a_rollouts_outcome_carries_each_scorer_failure() -> None:
    failure = pb.ScorerFailure(
        scorer="judge", type="unavailable", message="down", trajectory=1, action="drop_trajectory"
    )
    out = outcome_out(pb.RewardOutcome(dropped=[1], failures=[failure]))
    assert out.dropped == [1] and not out.group_dropped and out.fail_job == ""
    assert [f.model_dump() for f in out.failures] == [
        {
            "scorer": "judge",
            "type": "unavailable",
            "message": "down",
            "trajectory": 1,
            "action": "drop_trajectory",
        }
    ]


class _BreakingTrainer:
    """A WatchJob whose first stream ends UNAVAILABLE after one event."""

    def __init__(self) -> None:
        self.opened_from: list[int] = []

    def WatchJob(self, request: trainer_pb2.WatchJobRequest) -> Any:
        self.opened_from.append(request.from_seq)
        first = pb.ProgressEvent(seq=1, kind=pb.EVENT_KIND_STEP_STARTED, step=1)
        rest = [pb.ProgressEvent(seq=s, kind=pb.EVENT_KIND_STEP_STARTED, step=s) for s in (2, 3)]
        if len(self.opened_from) == 1:
            return _Call([first], error=grpc.StatusCode.UNAVAILABLE)
        return _Call([e for e in rest if e.seq >= request.from_seq])


async def test_the_sse_stream_reopens_a_broken_watch_after_the_last_event_sent() -> None:
    trainer = _BreakingTrainer()
    chunks = [
        c
        async for c in job_events(trainer, "j1", 0, pause_s=lambda _: 0.0)  # type: ignore[arg-type]
    ]
    ids = [c.decode().split("\n", 1)[0] for c in chunks]
    assert ids == ["id: 1", "id: 2", "id: 3"]
    assert trainer.opened_from == [0, 2]
