"""How a step's sampler/trainer mismatch looks in `jobs watch` and `jobs status`."""

from __future__ import annotations

from artfleet.v1 import common_pb2 as pb
from artfleet_cli import render

WARNING = (
    "sampler/trainer mismatch (vllm, policy lag mean 1 max 1): 8.0% of trained tokens have "
    "an importance ratio outside [0.5, 2.0] (bound 5.0%) over 200 tokens"
)


def _summary(step: int = 2, warning: str = "") -> pb.StepSummary:
    summary = pb.StepSummary(step=step, trained_sequences=4, staleness_mean=1.0, staleness_max=1)
    summary.mismatch.CopyFrom(
        pb.SamplerMismatch(engine="vllm", tokens=200, k3=0.0123, ratio_p1=0.61, ratio_p50=1.0,
                           ratio_p99=1.74, outside_0_5_2=0.08, warning=warning)
    )  # fmt: skip
    return summary


def test_the_step_line_shows_the_mismatch_with_its_engine_and_lag() -> None:
    line = render.step_line(_summary())
    assert line.endswith(
        " · mismatch k3 0.012, ratio 0.61-1.74, 8.0% outside [0.5, 2] (vllm, lag 1)"
    )
    on_policy = _summary()
    on_policy.staleness_max, on_policy.staleness_mean = 0, 0.0
    assert render.step_line(on_policy).endswith("outside [0.5, 2] (vllm)")
    assert "mismatch" not in render.step_line(pb.StepSummary(step=1))  # not measured


def test_watch_prints_the_steps_warning_event() -> None:
    events = [
        pb.ProgressEvent(kind=pb.EVENT_KIND_STEP_DONE, step=2, summary=_summary(2, WARNING)),
        pb.ProgressEvent(kind=pb.EVENT_KIND_LOG, step=2, message=f"warning: step 2: {WARNING}"),
        pb.ProgressEvent(kind=pb.EVENT_KIND_STATE, state=pb.JOB_STATE_SUCCEEDED),
    ]
    with render.console.capture() as captured:
        assert render.follow(events, 2) == pb.JOB_STATE_SUCCEEDED
    text = " ".join(captured.get().split())  # the terminal wraps long lines
    assert "mismatch k3 0.012" in text
    assert f"warning: step 2: {WARNING}" in text
    assert text.count("8.0% of trained tokens") == 1  # the event, not the summary again


def test_status_shows_the_figures_per_step_and_the_last_warning() -> None:
    job = pb.Job(id="j1", state=pb.JOB_STATE_RUNNING, completed_steps=3)
    job.spec.steps = 3
    job.steps.extend([pb.StepSummary(step=1), _summary(2, WARNING), _summary(3)])
    with render.console.capture() as captured:
        render.job_details(job)
    assert f"warning: step 2: {WARNING}" in " ".join(captured.get().split())
    table = render.summary_table(job)
    k3, outside = table.columns[-2:]
    assert (k3.header, outside.header) == ("mismatch k3", "ratio ∉ [0.5, 2]")
    assert list(k3.cells) == ["-", "0.012", "0.012"]  # step 1 measured nothing
    assert list(outside.cells) == ["-", "8.0%", "8.0%"]
