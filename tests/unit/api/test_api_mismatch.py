"""A step's sampler/trainer mismatch and policy lag in the HTTP API's StepOut."""

from __future__ import annotations

from artfleet.v1 import common_pb2 as pb
from artfleet_api.mapping import step_out


def test_step_out_carries_the_mismatch_and_the_policy_lag() -> None:
    summary = pb.StepSummary(step=2, staleness_mean=0.5, staleness_max=1)
    summary.mismatch.CopyFrom(
        pb.SamplerMismatch(engine="torch", tokens=3_000_000_000, k3=0.01, ratio_p50=1.0,
                           outside_0_5_2=0.08, warning="past")
    )  # fmt: skip
    out = step_out(summary)
    assert out.mismatch is not None
    assert (out.mismatch.engine, out.mismatch.tokens, out.mismatch.k3) == (
        "torch",
        3_000_000_000,
        0.01,
    )  # int64 comes as a JSON string from protobuf: read back as the number
    assert (out.mismatch.outside_0_5_2, out.mismatch.warning) == (0.08, "past")
    assert (out.staleness_mean, out.staleness_max) == (0.5, 1)
    assert out.model_dump(mode="json")["mismatch"]["tokens"] == 3_000_000_000


def test_a_step_without_a_measure_has_none() -> None:
    assert step_out(pb.StepSummary(step=1)).mismatch is None
