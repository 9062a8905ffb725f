"""ART's TrainConfig pair for a GRPO step of the torch backend, from LocalBackend-style
train() keyword arguments (the job spec's `grpo:` and `off_policy_correction:` become these
in jobs/grpo.py)."""

from __future__ import annotations

from typing import Any

from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import correction

# train() keyword arguments this backend understands (LocalBackend's names).
_CONFIG_KWARGS = frozenset(
    {
        "advantage_balance",
        "allow_training_without_logprobs",
        "epsilon",
        "epsilon_high",
        "importance_sampling_level",
        "kimi_k2_tau",
        "kl_penalty_coef",
        "logprob_calculation_chunk_size",
        "mask_prob_ratio",
        "num_trajectories_learning_rate_multiplier_power",
        "max_negative_advantage_importance_sampling_weight",
        "packed_sequence_length",
        "scale_rewards",
        "truncated_importance_sampling",
    }
)
_IGNORED_KWARGS = frozenset({"verbose", "plot_tensors", "precalculate_logprobs", "save_checkpoint"})


def build_train_configs(
    learning_rate: float, kwargs: dict[str, Any]
) -> tuple[art.types.TrainConfig, art.dev.TrainConfig]:
    """ART's TrainConfig pair from LocalBackend-style train() keyword arguments."""
    from art._backend_training import build_rl_train_configs

    options = dict(kwargs)
    loss_fn = options.pop("loss_fn", "cispo")
    if loss_fn not in ("cispo", "ppo"):
        raise ValueError(f"loss_fn must be 'cispo' or 'ppo', not {loss_fn!r}")
    if options.pop("normalize_advantages", True) is False:
        options["scale_rewards"] = False
    grad_accumulation = options.pop("grad_accumulation_sequences", None)
    sequence_mask_band = options.pop("sequence_mask_band", None)  # ours: correction.py
    unknown = set(options) - _CONFIG_KWARGS - _IGNORED_KWARGS
    if unknown:
        raise TypeError(f"TorchBackend.train() got unsupported arguments: {sorted(unknown)}")
    known = {k: v for k, v in options.items() if k in _CONFIG_KWARGS}
    config, dev_config = build_rl_train_configs(
        learning_rate=learning_rate, ppo=loss_fn == "ppo", **known
    )
    if grad_accumulation is not None:
        config = config.model_copy(update={"grad_accumulation_sequences": grad_accumulation})
    if sequence_mask_band is not None:
        correction.set_band(dev_config, sequence_mask_band)
    return config, dev_config
