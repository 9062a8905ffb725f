"""In-training evals reach API clients: on the job and as `eval` stream events."""

from __future__ import annotations

from artfleet.v1 import common_pb2 as pb
from artfleet_api.mapping import event_out, job_out


def _summary(step: int, pass_at_k: float) -> pb.EvalSummary:
    return pb.EvalSummary(step=step, split="test", k=2, tasks=3, pass_at_k=pass_at_k)


def test_a_job_carries_its_evals_oldest_first() -> None:
    job = pb.Job(id="j1", spec=pb.JobSpec(name="a", project="p", steps=2))
    job.evals.extend([_summary(0, 0.25), _summary(2, 0.5)])
    out = job_out(job)
    assert [(e.step, e.pass_at_k, e.k, e.split) for e in out.evals] == [
        (0, 0.25, 2, "test"),
        (2, 0.5, 2, "test"),
    ]


def test_an_eval_event_streams_with_its_summary() -> None:
    event = pb.ProgressEvent(seq=7, kind=pb.EVENT_KIND_EVAL, step=2, eval=_summary(2, 0.5))
    out = event_out(event)
    assert out.kind == "eval" and out.eval is not None and out.eval.pass_at_k == 0.5
    assert '"kind":"eval"' in out.model_dump_json()
