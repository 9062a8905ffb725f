"""The job spec's `grpo:` block: ART 0.5.18's `backend.train` options, validated.

Every field is optional: unset means ART's default, and only set fields reach
`backend.train`, so a spec without `grpo:` trains exactly as before. Names are ART's
(`LocalBackend.train` keyword arguments; `grad_accumulation_sequences` is TrainConfig's).
Which backend honours which option is the trainer's business
(`artfleet_trainer.jobs.grpo`), checked at submit.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from artfleet.v1 import common_pb2 as pb


class GrpoModel(BaseModel):
    """`grpo:` in a job spec."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    loss_fn: Literal["cispo", "ppo"] | None = None
    normalize_advantages: bool | None = None
    scale_rewards: bool | None = None
    advantage_balance: float | None = Field(default=None, ge=-1.0, le=1.0)
    epsilon: float | None = Field(default=None, gt=0, le=10.0)
    epsilon_high: float | None = Field(default=None, gt=0, le=10.0)
    kl_penalty_coef: float | None = Field(default=None, ge=0, le=100.0)
    kl_penalty_reference_step: int | None = Field(default=None, ge=0)
    importance_sampling_level: (
        Literal["token", "sequence", "average", "geometric_average"] | None
    ) = None
    max_negative_advantage_importance_sampling_weight: float | None = Field(
        default=None, gt=0, le=1e6
    )
    mask_prob_ratio: bool | None = None
    kimi_k2_tau: float | None = Field(default=None, gt=0, le=1e6)
    truncated_importance_sampling: float | None = Field(default=None, gt=0, le=1e6)
    scale_learning_rate_by_reward_std_dev: bool | None = None
    num_trajectories_learning_rate_multiplier_power: float | None = Field(
        default=None, ge=-4.0, le=4.0
    )
    packed_sequence_length: int | None = Field(default=None, ge=16, le=1_048_576)
    logprob_calculation_chunk_size: int | None = Field(default=None, ge=16, le=1_048_576)
    allow_training_without_logprobs: bool | None = None
    precalculate_logprobs: bool | None = None
    grad_accumulation_sequences: int | None = Field(default=None, ge=1, le=4096)

    def set_fields(self) -> dict[str, Any]:
        """The options a person set (what goes to `backend.train`)."""
        return self.model_dump(exclude_none=True)


def grpo_to_proto(grpo: GrpoModel) -> pb.GrpoSpec:
    return pb.GrpoSpec(**grpo.set_fields())


def grpo_data_from_proto(message: pb.GrpoSpec) -> dict[str, Any]:
    return {field.name: value for field, value in message.ListFields()}
