"""The job spec's `sft:` block: an SFT warm-start before GRPO step 1 (the terminal agent's
offline phase). Names follow the offline-sample format where it has them (`min_score` keeps
samples above a score) and ART's `TrainSFTConfig` (`learning_rate`, `batch_size`) otherwise.

Which backend honours which option is the trainer's business (`artfleet_trainer.sft`),
checked at submit together with the data file, which lives on the trainer.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from artfleet.v1 import common_pb2 as pb

# "offline": records `{task_id, score, extra: {conversation}}`; "messages": OpenAI chat.
SFT_FORMATS = ("auto", "offline", "messages")
# An earlier name of a format, still accepted (job specs stored in Redis carry it).
FORMAT_ALIASES = {"seed004": "offline"}
# ART's TrainSFTConfig default rate, and LocalBackend's default SFT batch size.
DEFAULT_SFT_LEARNING_RATE = 5e-5
DEFAULT_SFT_BATCH_SIZE = 2


class SftModel(BaseModel):
    """`sft:` in a job spec."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_path: str = Field(
        min_length=1,
        max_length=4096,
        description="SFT warm-start before GRPO: offline samples (.json) or OpenAI-messages"
        " JSONL, a path on the trainer",
    )
    format: Literal["auto", "offline", "messages"] = "auto"
    min_score: float | None = Field(default=None, allow_inf_nan=False)
    epochs: int = Field(default=1, ge=1, le=1000)
    learning_rate: float = Field(default=DEFAULT_SFT_LEARNING_RATE, gt=0, le=1.0)
    batch_size: int = Field(default=DEFAULT_SFT_BATCH_SIZE, ge=1, le=4096)
    max_samples: int = Field(default=0, ge=0, le=10_000_000)  # 0 = every kept sample
    max_length: int = Field(default=0, ge=0, le=1_048_576)  # 0 = the model's context
    shuffle: bool = True

    @field_validator("format", mode="before")
    @classmethod
    def _current_format_name(cls, value: Any) -> Any:
        return FORMAT_ALIASES.get(value, value) if isinstance(value, str) else value


def sft_to_proto(sft: SftModel) -> pb.SftSpec:
    message = pb.SftSpec(
        data_path=sft.data_path,
        format=sft.format,
        epochs=sft.epochs,
        learning_rate=sft.learning_rate,
        batch_size=sft.batch_size,
        max_samples=sft.max_samples,
        max_length=sft.max_length,
        shuffle=sft.shuffle,
    )
    if sft.min_score is not None:
        message.min_score = sft.min_score
    return message


def sft_data_from_proto(message: pb.SftSpec) -> dict[str, Any]:
    """Set fields only: a zero value means the default (proto3), presence-tracked ones
    (`min_score`, `shuffle`) keep an explicit 0 / false."""
    return {field.name: value for field, value in message.ListFields()}
