"""A step's sampler/trainer mismatch: from the backend's train metrics into the step's
summary, the warning past a bound (with the step's policy lag), and the trainer metrics."""

from __future__ import annotations

from prometheus_client import REGISTRY

from artfleet.v1 import common_pb2 as pb
from artfleet_trainer import metrics
from artfleet_trainer.jobs import mismatch

FIGURES = {
    "mismatch/tokens": 200.0,
    "mismatch/abs_delta_mean": 0.05,
    "mismatch/abs_delta_p99": 0.9,
    "mismatch/k3": 0.004,
    "mismatch/ratio_p1": 0.6,
    "mismatch/ratio_p50": 1.0,
    "mismatch/ratio_p99": 1.7,
    "mismatch/outside_0_9_1_1": 0.2,
    "mismatch/outside_0_5_2": 0.01,
}


def test_the_figures_go_into_the_summary_labelled_with_the_engine() -> None:
    summary = pb.StepSummary(step=3)
    warned = mismatch.mark("j1", summary, {"loss": 0.1, **FIGURES}, "vllm",
                           outside_share=0.05, k3=0.02)  # fmt: skip
    assert warned == "" and summary.HasField("mismatch")
    m = summary.mismatch
    assert (m.engine, m.tokens, m.k3, m.ratio_p99, m.outside_0_5_2) == (
        "vllm",
        200,
        0.004,
        1.7,
        0.01,
    )
    assert m.warning == ""


def test_a_step_without_figures_has_no_mismatch() -> None:
    for train_metrics in ({"loss": 0.1}, {**FIGURES, "mismatch/tokens": 0.0}):
        summary = pb.StepSummary(step=1)
        assert (
            mismatch.mark("j1", summary, train_metrics, "torch", outside_share=0.05, k3=0.02) == ""
        )
        assert not summary.HasField("mismatch")


def test_past_either_bound_the_step_says_so_with_its_lag() -> None:
    summary = pb.StepSummary(step=4, staleness_mean=0.5, staleness_max=1)
    far = {**FIGURES, "mismatch/outside_0_5_2": 0.08, "mismatch/k3": 0.03}
    warned = mismatch.mark("j1", summary, far, "vllm", outside_share=0.05, k3=0.02)
    assert warned == summary.mismatch.warning
    assert warned.startswith("sampler/trainer mismatch (vllm, policy lag mean 0.5 max 1): ")
    assert (
        "8.0% of trained tokens have an importance ratio outside [0.5, 2.0] (bound 5.0%)" in warned
    )
    assert "k3 0.03 (bound 0.02)" in warned and "over 200 tokens" in warned
    only_k3 = mismatch.warning(summary.mismatch, 0.1, 0.02)
    assert "k3 0.03" in only_k3 and "outside [0.5, 2.0]" not in only_k3
    assert mismatch.warning(summary.mismatch, 0.0, 0.0) == ""  # bounds off


def test_the_engine_that_sampled() -> None:
    assert mismatch.sampling_engine("torch", "torch") == "torch"
    assert mismatch.sampling_engine("torch", "vllm") == "vllm"
    assert mismatch.sampling_engine("art", "torch") == "vllm"  # ART's LocalBackend: vLLM


def test_a_step_sets_the_mismatch_metrics_by_engine() -> None:
    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    tokens = sample("artfleet_trainer_mismatch_tokens_total", engine="torch")
    warnings = sample("artfleet_trainer_mismatch_warnings_total", engine="torch")
    summary = pb.StepSummary(step=2)
    mismatch.mark("j1", summary, {**FIGURES, "mismatch/k3": 0.5}, "torch",
                  outside_share=0.05, k3=0.02)  # fmt: skip
    metrics.observe_step(summary)
    assert sample("artfleet_trainer_mismatch", engine="torch", figure="k3") == 0.5
    assert sample("artfleet_trainer_mismatch", engine="torch", figure="outside_0_5_2") == 0.01
    assert sample("artfleet_trainer_mismatch_tokens_total", engine="torch") == tokens + 200
    assert sample("artfleet_trainer_mismatch_warnings_total", engine="torch") == warnings + 1
