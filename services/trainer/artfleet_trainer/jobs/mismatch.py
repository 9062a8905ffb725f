"""A step's sampler/trainer mismatch, from its train metrics into its summary, and a warning
when it is far past a bound. The figures themselves are computed by the torch backend
(`torch_backend/mismatch.py`), which names them `mismatch/<field>` in the step's metrics.

No torch here: the servicer's side imports this module.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from artfleet.v1 import common_pb2 as pb

log = logging.getLogger(__name__)

PREFIX = "mismatch/"
# Fields of pb.SamplerMismatch that a step's train metrics carry as PREFIX + name.
FIGURES = (
    "tokens",
    "abs_delta_mean",
    "abs_delta_p99",
    "k3",
    "ratio_p1",
    "ratio_p50",
    "ratio_p99",
    "outside_0_9_1_1",
    "outside_0_5_2",
)


def sampling_engine(backend: str, inference_engine: str) -> str:
    """What sampled a job's trajectories: the art backend's is always vLLM."""
    return inference_engine if backend == "torch" else "vllm"


def from_metrics(train_metrics: Mapping[str, Any], engine: str) -> pb.SamplerMismatch | None:
    """The step's figures; None when it counted no token (no sampler logprobs, nothing
    trained, or a backend that does not measure them)."""
    if not all(PREFIX + name in train_metrics for name in FIGURES):
        return None
    if not train_metrics[PREFIX + "tokens"]:
        return None
    out = pb.SamplerMismatch(engine=engine, tokens=int(train_metrics[PREFIX + "tokens"]))
    for name in FIGURES[1:]:
        setattr(out, name, float(train_metrics[PREFIX + name]))
    return out


def warning(m: pb.SamplerMismatch, outside_share: float, k3: float, lag: str = "") -> str:
    """What is past its bound ("" when nothing is; a bound of 0 is off); `lag` names the
    step's policy lag, when its trajectories were sampled by older policies."""
    past = []
    if outside_share and m.outside_0_5_2 > outside_share:
        past.append(
            f"{m.outside_0_5_2:.1%} of trained tokens have an importance ratio outside "
            f"[0.5, 2.0] (bound {outside_share:.1%})"
        )
    if k3 and m.k3 > k3:
        past.append(f"KL(sampler || trainer) k3 {m.k3:.4g} (bound {k3:.4g})")
    if not past:
        return ""
    return (
        f"sampler/trainer mismatch ({m.engine}{lag}): {'; '.join(past)} over {m.tokens} "
        "tokens; "
        "the trainer does not score what the sampler sampled (a stale policy, a different "
        "model or precision on the engine)"
    )


def mark(
    job_id: str,
    summary: pb.StepSummary,
    train_metrics: Mapping[str, Any],
    engine: str,
    *,
    outside_share: float,
    k3: float,
) -> str:
    """Put the step's figures in its summary (after its staleness); returns its warning
    ("" when none)."""
    found = from_metrics(train_metrics, engine)
    if found is None:
        return ""
    lag = ""
    if summary.staleness_max:  # pipeline.record put it there
        lag = f", policy lag mean {summary.staleness_mean:.2g} max {summary.staleness_max}"
    found.warning = warning(found, outside_share, k3, lag)
    summary.mismatch.CopyFrom(found)
    if found.warning:
        log.warning("job %s step %d: %s", job_id, summary.step, found.warning)
    return found.warning
