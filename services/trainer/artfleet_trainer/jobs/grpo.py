"""The job spec's GRPO knobs and off-policy correction → `backend.train` keyword arguments,
and which backend honours which (checked at submit, so a job never fails at step 1 for a
knob).

No torch here: the servicer imports this module.
"""

from __future__ import annotations

from typing import Any

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import JobSpecModel

# What the torch backend does not implement (torch_backend/training.py honours the rest):
# a reference adapter other than the base model, ART's LR scalings, and recomputing the
# sampling logprobs before the step.
TORCH_UNSUPPORTED = {
    "kl_penalty_reference_step": "the KL reference is always the base model (LoRA off)",
    "scale_learning_rate_by_reward_std_dev": "not implemented (ART's LocalBackend ignores it too)",
    "precalculate_logprobs": "the sampling logprobs are always the old policy's",
}
# LocalBackend.train takes no `grad_accumulation_sequences` (ART packs rows itself).
ART_UNSUPPORTED = {
    "grad_accumulation_sequences": "LocalBackend.train has no such argument",
}


# The torch backend's own train() argument for `sequence_mask` (its loss masks the
# sequences: torch_backend/correction.py); ART's LocalBackend has no such option.
SEQUENCE_MASK_KWARG = "sequence_mask_band"


def unsupported(backend: str) -> dict[str, str]:
    return TORCH_UNSUPPORTED if backend == "torch" else ART_UNSUPPORTED


def check_backend(spec: JobSpecModel) -> None:
    """InvalidArgument naming the first `grpo.<knob>` the job's backend cannot honour."""
    refused = unsupported(spec.backend)
    for name in spec.grpo.set_fields():
        if name in refused:
            raise InvalidArgument(
                f"not supported by the {spec.backend} backend: {refused[name]}", f"grpo.{name}"
            )
    if spec.backend != "torch" and spec.correction.mode == "sequence_mask":
        raise InvalidArgument(
            f"sequence_mask is the torch backend's own (ART's {spec.backend} backend has no"
            " such option); use mode tis or none",
            "off_policy_correction.mode",
        )


def train_kwargs(spec: JobSpecModel) -> dict[str, Any]:
    """The knobs a person set and the job's off-policy correction (its default when unset:
    `JobSpecModel.correction`), as `backend.train(..., **kwargs)` takes them."""
    kwargs = spec.grpo.set_fields()
    correction = spec.correction
    if correction.mode == "tis":
        kwargs["truncated_importance_sampling"] = correction.tis_cap
    elif correction.mode == "sequence_mask":
        kwargs[SEQUENCE_MASK_KWARG] = correction.band
    return kwargs
