"""`artfleet demo`'s job and its before/after line (no fleet: the job spec and the figures)."""

from __future__ import annotations

import pytest

from artfleet.cli.demo import _gain_line, demo_spec
from artfleet.v1 import common_pb2 as pb


def test_demo_job_evaluates_the_test_split_before_and_after_training() -> None:
    spec = demo_spec(steps=3, groups=8, rollouts=8, eval_k=2, seed=7)
    assert (spec.environment, spec.max_turns, spec.eval_split) == ("math-single", 1, "test")
    assert spec.eval_every_steps == spec.steps == 3  # evals at step 0 and step 3 only
    assert [s.name for s in spec.reward] == ["answer_check"]


def test_gain_line_pairs_the_first_and_last_eval_by_task() -> None:
    def summary(step: int, successes: list[int]) -> pb.EvalSummary:
        results = [
            pb.EvalTaskResult(scenario_id=f"t{i}", samples=2, successes=c, rewards=[0.0, 0.0])
            for i, c in enumerate(successes)
        ]
        rate = sum(successes) / (2 * len(successes))
        return pb.EvalSummary(step=step, k=2, success_rate=rate, results=results)

    job = pb.Job(evals=[summary(0, [0, 1, 0, 0]), summary(3, [2, 1, 1, 0])])
    line = _gain_line(job)
    assert line.startswith("held-out success: 12.5% before (step 0) -> 50.0% after (step 3)")
    assert "+37.5 points" in line and "over 4 tasks" in line


def test_engine_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    from artfleet.cli import demo

    monkeypatch.setattr(demo, "vllm_python", lambda: "")
    assert demo.pick_engine("auto") == "torch"  # says why, on the console
    assert demo.pick_engine("torch") == "torch"
    for bad in ("vllm", "tgi"):  # asked for what is not here / not an engine: exit 2
        with pytest.raises(SystemExit) as caught:
            demo.pick_engine(bad)
        assert caught.value.code == 2
    monkeypatch.setattr(demo, "vllm_python", lambda: "/opt/vllm/bin/python")
    assert demo.pick_engine("auto") == "vllm"
    assert demo.pick_engine("vllm") == "vllm"
