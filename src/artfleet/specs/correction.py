"""The job spec's `off_policy_correction:` block: how the loss corrects for trajectories
sampled by another policy than the one the trainer scores (an older version in an
asynchronous job, or the same weights through another engine's numerics).

- `none`: ART's loss as it is (its own clipped ratio only);
- `tis`: ART's truncated importance sampling, each token's loss times
  min(exp(trainer_lp - sampler_lp), cap) (ART 0.5.18's `truncated_importance_sampling`);
- `sequence_mask`: a trajectory whose geometric-mean ratio exp(mean over its trained tokens
  of trainer_lp - sampler_lp) is outside [band_low, band_high] is dropped (weight 0); the
  torch backend's own (ART has no such option).

Unset, a job gets `none`, asynchronous ones too (`effective`; docs/training.md says why:
ART's loss already weighs each token by its clipped ratio to the sampler's logprob, and its
`truncated_importance_sampling` without precalculated logprobs multiplies that same ratio
again). Which backend honours which mode is checked at submit by the trainer
(`artfleet_trainer.jobs.grpo`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from artfleet.specs.base import FieldError
from artfleet.v1 import common_pb2 as pb

# The cap of the truncated-importance-sampling write-ups: a token sampled at half the
# trainer's probability counts at most twice.
DEFAULT_TIS_CAP = 2.0
# Symmetric in log space (ln 2 either way). Precision alone moves a token's ratio by a few
# percent (docs/training.md, "The importance ratio") and a sequence's geometric mean far
# less, so only real drift (versions apart, another model or template) leaves this band.
DEFAULT_BAND = (0.5, 2.0)
# The mask's band edges are inclusive up to float rounding (in log space).
BAND_EDGE_TOLERANCE = 1e-6

Mode = Literal["none", "tis", "sequence_mask"]


class CorrectionModel(BaseModel):
    """`off_policy_correction:` in a job spec."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode = Field(
        description="off-policy correction: none | tis (truncated importance sampling) |"
        " sequence_mask (drop sequences whose ratio leaves the band)"
    )
    cap: float | None = Field(
        default=None,
        ge=1.0,
        le=1e6,
        allow_inf_nan=False,
        description=f"tis: the importance weight's cap (unset = {DEFAULT_TIS_CAP})",
    )
    band_low: float | None = Field(
        default=None,
        gt=0.0,
        le=1e6,
        allow_inf_nan=False,
        description=f"sequence_mask: lowest kept sequence ratio (unset = {DEFAULT_BAND[0]})",
    )
    band_high: float | None = Field(
        default=None,
        gt=0.0,
        le=1e6,
        allow_inf_nan=False,
        description=f"sequence_mask: highest kept sequence ratio (unset = {DEFAULT_BAND[1]})",
    )

    @model_validator(mode="after")
    def _consistent(self) -> CorrectionModel:
        if self.cap is not None and self.mode != "tis":
            raise FieldError(("cap",), f"applies to mode tis only, not {self.mode}")
        band_set = self.band_low is not None or self.band_high is not None
        if band_set and self.mode != "sequence_mask":
            name = "band_low" if self.band_low is not None else "band_high"
            raise FieldError((name,), f"applies to mode sequence_mask only, not {self.mode}")
        if self.mode == "sequence_mask":
            low, high = self.band
            if low >= high:
                raise FieldError(("band_low",), f"must be below band_high ({low:g} >= {high:g})")
            if not low <= 1.0 <= high:
                # An on-policy sequence's ratio is 1: a band without it drops every one.
                raise FieldError(
                    ("band_low",), f"the band [{low:g}, {high:g}] must contain 1.0 (on-policy)"
                )
        return self

    @property
    def tis_cap(self) -> float:
        return DEFAULT_TIS_CAP if self.cap is None else self.cap

    @property
    def band(self) -> tuple[float, float]:
        low = DEFAULT_BAND[0] if self.band_low is None else self.band_low
        high = DEFAULT_BAND[1] if self.band_high is None else self.band_high
        return low, high


def effective(block: CorrectionModel | None, *, grpo_tis: float | None) -> CorrectionModel:
    """The correction a job trains with: its block, else the `grpo:` block's own
    `truncated_importance_sampling` (ART's name for tis), else none: whatever the job's
    staleness, the loss's own clipped ratio to the sampler's logprobs is the correction
    (docs/training.md, "Off-policy correction")."""
    if block is not None:
        return block
    if grpo_tis is not None:
        # ART takes any positive cap there: built as given, not validated again.
        return CorrectionModel.model_construct(mode="tis", cap=grpo_tis)
    return CorrectionModel(mode="none")


def correction_to_proto(block: CorrectionModel) -> pb.OffPolicyCorrection:
    return pb.OffPolicyCorrection(**block.model_dump(exclude_none=True))


def correction_data_from_proto(message: pb.OffPolicyCorrection) -> dict[str, Any]:
    return {field.name: value for field, value in message.ListFields()}
