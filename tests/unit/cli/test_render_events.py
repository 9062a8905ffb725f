"""How evals and queue positions look in the CLI (artfleet_cli.render)."""

from __future__ import annotations

from artfleet.v1 import common_pb2 as pb
from artfleet_cli import render


def test_eval_events_and_queue_positions_are_shown() -> None:
    summary = pb.EvalSummary(
        step=4, split="test", k=2, tasks=3, reward_mean=0.5, success_rate=0.5,
        avg_at_k=0.5, pass_at_k=2 / 3,
    )  # fmt: skip
    assert render.eval_line(summary) == (
        "eval @ step 4 (test, 3 tasks, k=2): reward +0.500 · success 50.0% · "
        "avg@2 0.500 · pass@2 0.667"
    )
    events = [
        pb.ProgressEvent(kind=pb.EVENT_KIND_EVAL, step=4, eval=summary),
        pb.ProgressEvent(kind=pb.EVENT_KIND_STATE, state=pb.JOB_STATE_SUCCEEDED),
    ]
    with render.console.capture() as captured:
        assert render.follow(events, 4) == pb.JOB_STATE_SUCCEEDED
    assert "pass@2 0.667" in captured.get()
    queued = pb.Job(id="j1", state=pb.JOB_STATE_QUEUED, queue_position=2, config_hash="abc")
    queued.spec.experiment = "exp"
    with render.console.capture() as captured:
        render.console.print(render.jobs_table([queued]))
        render.job_details(queued)
    text = captured.get()
    assert "QUEUED #2" in text and "queue position 2" in text and "abc" in text
