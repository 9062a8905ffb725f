"""The sampling settings of a job's policy calls: sent with every call and recorded on
every trajectory (its `metadata`, which the trajectory codec carries through Redis to the
trainer), so what the trainer trains on says which distribution sampled it.

The trainer scores each token under the policy's whole distribution. A sampler that
truncates it (`top_p` < 1, `top_k`, `min_p`) samples from another one, which no importance
ratio of the two engines' logprobs accounts for, so an off-policy correction would be
meaningless there. The job spec has no truncating setting, and the rollout always sends
the full distribution explicitly: vLLM otherwise takes the model's `generation_config.json`
defaults for what a request leaves out (Qwen3's top_p 0.95, top_k 20).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

# The metadata keys: "sampling_" + the request field's name.
PREFIX = "sampling_"


@dataclass(frozen=True)
class Sampling:
    temperature: float
    top_p: float = 1.0
    top_k: int = 0  # 0: no cut (vLLM's "disabled"; the torch server's too)
    min_p: float = 0.0

    def request_fields(self) -> dict[str, Any]:
        """The OpenAI-compatible request's sampling fields (top_k and min_p are vLLM's)."""
        return asdict(self)

    def to_metadata(self) -> dict[str, float | int]:
        return {PREFIX + key: value for key, value in asdict(self).items()}

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> Sampling | None:
        """The settings a trajectory records; None for one sampled before they were."""
        if PREFIX + "temperature" not in metadata:
            return None
        fields = {
            key: metadata[PREFIX + key]
            for key in cls.__dataclass_fields__
            if PREFIX + key in metadata
        }
        return cls(**fields)
