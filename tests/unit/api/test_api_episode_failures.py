"""A step's failed episodes reach the HTTP API: the job body's steps and the SSE stream's
step events carry the counts by type and the warning."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2
from artfleet_api.mapping import job_out
from artfleet_api.sse import job_events

WARNING = "6/8 episodes failed (more than 25%): 5 AssertionError, 1 KeyError; first: ..."


def _summary() -> pb.StepSummary:
    summary = pb.StepSummary(step=3, episodes_failed=6, episodes=8, failure_warning=WARNING)
    summary.episode_failures.update({"AssertionError": 5, "KeyError": 1})
    return summary


class _Trainer:
    """WatchJob answers one step event, then the stream ends."""

    def __init__(self, event: pb.ProgressEvent) -> None:
        self.event = event

    def WatchJob(self, request: trainer_pb2.WatchJobRequest) -> _Trainer:
        return self

    def __aiter__(self) -> AsyncIterator[pb.ProgressEvent]:
        async def events() -> AsyncIterator[pb.ProgressEvent]:
            yield self.event

        return events()

    def cancel(self) -> None:
        pass


def test_the_job_body_has_each_steps_failed_episodes_by_type() -> None:
    job = pb.Job(id="j1")
    job.steps.extend([pb.StepSummary(step=1), _summary()])
    quiet, lossy = job_out(job).steps
    assert (quiet.episode_failures, quiet.episodes_failed, quiet.failure_warning) == ({}, 0, "")
    assert lossy.episode_failures == {"AssertionError": 5, "KeyError": 1}
    assert (lossy.episodes_failed, lossy.episodes, lossy.failure_warning) == (6, 8, WARNING)


async def test_the_sse_step_event_carries_the_failed_episodes_and_the_warning() -> None:
    event = pb.ProgressEvent(seq=7, kind=pb.EVENT_KIND_STEP_DONE, step=3, summary=_summary())
    chunks = [c async for c in job_events(_Trainer(event), "j1", 0)]  # type: ignore[arg-type]
    summary = json.loads(chunks[0].decode().split("data: ", 1)[1])["summary"]
    assert summary["episode_failures"] == {"AssertionError": 5, "KeyError": 1}
    assert (summary["episodes_failed"], summary["failure_warning"]) == (6, WARNING)
