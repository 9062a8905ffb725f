"""The off-policy corrections against their formulas on hand-made tensors: `tis` through
ART's own loss with the dev config our mapping builds from the job spec, `sequence_mask`
through torch_backend/correction.py (which sequences are dropped at the band's edges), and
the mask inside a GRPO step (`_row_loss`) with its count in the step's stats."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from peft import get_peft_model
from tiny_llama import tiny_llama

from artfleet.specs.job import validate_spec
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.jobs import grpo
from artfleet_trainer.torch_backend import correction, train_config, training

NAN = float("nan")


def _configs(spec: dict[str, Any]) -> tuple[Any, Any]:
    job = validate_spec(spec)
    grpo.check_backend(job)
    return train_config.build_train_configs(1e-5, grpo.train_kwargs(job))


def _unshift(shifted: torch.Tensor, pad: float) -> torch.Tensor:
    """The packed tensor whose `art.loss.shift_tensor` is `shifted` (its last column the
    shift's pad): position t of `shifted` is token t+1's."""
    return torch.cat([torch.full_like(shifted[:, :1], pad), shifted[:, :-1]], dim=1)


def _inputs(
    group_ids: list[int], sampler_lp: list[float], *, trained: list[bool] | None = None
) -> Any:
    """One row, given in the loss's (shifted) positions (ART's TrainInputs keys)."""
    mask = trained if trained is not None else [g > 0 for g in group_ids]
    row = {
        "group_ids": torch.tensor([group_ids]),
        "logprobs": torch.tensor([sampler_lp]),
        "assistant_mask": torch.tensor([mask]),
        "advantages": torch.tensor([[1.0, -2.0, 0.5, 1.5, -1.0, 2.0][: len(group_ids)]]),
        "weights": torch.ones(1, len(group_ids)),
    }
    pads = {"group_ids": -1, "logprobs": NAN, "assistant_mask": 0, "advantages": 0, "weights": 0}
    unshifted = {k: _unshift(v.double(), pads[k]) for k, v in row.items()}
    unshifted["group_ids"] = unshifted["group_ids"].long()
    unshifted["assistant_mask"] = unshifted["assistant_mask"].bool()
    unshifted["logprobs"] = unshifted["logprobs"].float()
    unshifted["advantages"] = unshifted["advantages"].float()
    unshifted["weights"] = unshifted["weights"].float()
    return unshifted


# --- tis: ART's option, set by our mapping ------------------------------------------------


def test_tis_multiplies_each_token_loss_by_its_ratio_capped() -> None:
    _, dev = _configs({"off_policy_correction": {"mode": "tis", "cap": 1.5}})
    assert dev["truncated_importance_sampling"] == 1.5
    # One trained sequence of 5 tokens (the last column is the shift's pad).
    old = [-1.0, -2.0, -0.5, -3.0, -1.0, 0.0]
    new = torch.tensor([[-1.0, -1.0, -1.0, -1.0, -1.0, 0.0]])
    inputs = _inputs([1, 1, 1, 1, 1, -1], old)
    loss = art.loss.loss_fn(inputs, new, None, None, dev).policy_loss
    # CISPO (ART's default loss): -clip(r, 1-1, 1+4) * A * new_lp, times min(r, cap).
    advantages = [1.0, -2.0, 0.5, 1.5, -1.0]
    terms = []
    for o, n, a in zip(old[:5], new[0, :5].tolist(), advantages, strict=True):
        ratio = math.exp(n - o)
        terms.append(-min(max(ratio, 0.0), 5.0) * a * n * min(ratio, 1.5))
    assert float(loss) == pytest.approx(sum(terms) / 5, rel=1e-5)
    _, plain = _configs({"off_policy_correction": {"mode": "none"}})
    assert "truncated_importance_sampling" not in plain
    assert float(art.loss.loss_fn(inputs, new, None, None, plain).policy_loss) != pytest.approx(
        float(loss)
    )


def test_an_unset_correction_adds_nothing_to_arts_loss_asynchronous_or_not() -> None:
    for spec in ({}, {"max_steps_off_policy": 2}):
        _, dev = _configs(spec)
        assert "truncated_importance_sampling" not in dev
        assert correction.band_of(dev) is None
    # ART's own name in the `grpo:` block still works, and is the job's correction.
    _, dev = _configs({"max_steps_off_policy": 1, "grpo": {"truncated_importance_sampling": 3}})
    assert dev["truncated_importance_sampling"] == 3


def test_sequence_mask_reaches_the_dev_config_and_the_art_backend_refuses_it() -> None:
    _, dev = _configs({"off_policy_correction": {"mode": "sequence_mask", "band_high": 4.0}})
    assert correction.band_of(dev) == (0.5, 4.0)
    with pytest.raises(Exception, match="torch backend's own") as info:
        grpo.check_backend(
            validate_spec({"backend": "art", "off_policy_correction": {"mode": "sequence_mask"}})
        )
    assert getattr(info.value, "field", "") == "off_policy_correction.mode"


# --- sequence_mask: which sequences are dropped --------------------------------------------


def test_sequences_outside_the_band_get_weight_zero_and_its_edges_are_kept() -> None:
    band = (0.5, 2.0)
    # The new logprobs are 0 everywhere: a sequence's log ratio is -mean(sampler_lp).
    edge_low, edge_high = math.log(2.0), math.log(0.5)  # ratio exactly 0.5, exactly 2.0
    groups = [0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, -1]
    sampler = [
        NAN,  # the prompt (group 0): no trained token
        edge_low, edge_low,  # ratio 0.5: kept (edge)
        edge_high, edge_high,  # ratio 2.0: kept (edge)
        edge_low + 0.01, edge_low + 0.01,  # just below 0.5: dropped
        edge_high - 0.01, edge_high - 0.01,  # just above 2.0: dropped
        NAN, 5.0,  # one token without a sampler logprob, left out of the mean: dropped
        NAN,  # no sampler logprob at all: kept (ART takes its ratio for 1)
        NAN,
    ]  # fmt: skip
    inputs = _inputs(groups, sampler)
    before = inputs["weights"].clone()
    new = torch.zeros(1, len(groups))
    ratios = correction.sequence_log_ratios(inputs, new)[0]
    assert ratios[1] == pytest.approx(math.log(0.5)) and ratios[2] == pytest.approx(math.log(2))
    assert ratios[5] == pytest.approx(-5.0) and 6 not in ratios and 0 not in ratios
    masked_inputs, masked = correction.mask_sequences(inputs, new, band)
    assert masked == 3
    dropped = torch.isin(inputs["group_ids"], torch.tensor([3, 4, 5]))
    assert bool((masked_inputs["weights"][dropped] == 0).all())
    assert torch.equal(masked_inputs["weights"][~dropped], before[~dropped])
    assert torch.equal(inputs["weights"], before)  # the given inputs are left as they were
    # A wider band drops only what is outside it: [0.01, 100] keeps all but ratio e^-5.
    assert correction.mask_sequences(inputs, new, (0.01, 100.0))[1] == 1


def test_a_dropped_sequence_contributes_nothing_to_arts_loss() -> None:
    _, dev = _configs({})
    groups = [1, 1, 2, 2, 2, -1]
    sampler = [-1.0, -1.0, -4.0, -4.0, -4.0, NAN]  # sequence 2 far more likely now: e^3
    new = torch.tensor([[-1.2, -0.8, -1.0, -1.0, -1.0, 0.0]])
    inputs = _inputs(groups, sampler)
    masked_inputs, masked = correction.mask_sequences(inputs, new, (0.5, 2.0))
    assert masked == 1
    by_hand: Any = {**inputs, "weights": inputs["weights"] * (inputs["group_ids"] != 2)}
    loss = art.loss.loss_fn(masked_inputs, new, None, None, dev).policy_loss
    assert float(loss) == float(art.loss.loss_fn(by_hand, new, None, None, dev).policy_loss)
    assert float(loss) != float(art.loss.loss_fn(inputs, new, None, None, dev).policy_loss)


# --- inside a GRPO step --------------------------------------------------------------------


def _lora_model() -> Any:
    model = get_peft_model(tiny_llama(64, tie_word_embeddings=True), training.lora_config(4))
    torch.manual_seed(1)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.05)
    return model


def _packed(model: Any) -> Any:
    """One row: a prompt (group 1) and two completions (2, 3); the sampler's logprobs are
    the model's own for sequence 2 and 3 nats lower per token for sequence 3."""
    torch.manual_seed(2)
    tokens = torch.randint(1, 64, (1, 14))
    group_ids = torch.tensor([[1] * 4 + [2] * 5 + [3] * 5])
    parent_ids = torch.ones_like(group_ids)
    input_pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        own, _ = training.compute_logprobs(model, tokens, input_pos, group_ids, parent_ids)
    # The packed `logprobs` at t is token t's (ART's loss shifts them onto position t-1).
    sampler = _unshift(own, NAN)
    sampler[group_ids == 3] -= 3.0
    assistant = group_ids > 1
    sampler[~assistant] = NAN
    return {
        "tokens": tokens,
        "input_pos": input_pos,
        "group_ids": group_ids,
        "parent_ids": parent_ids,
        "assistant_mask": assistant,
        "logprobs": sampler,
        "advantages": torch.where(group_ids == 2, 1.0, -1.0) * assistant,
        "weights": torch.ones(1, 14),
        "pixel_values": [None],
        "image_grid_thw": [None],
    }


def test_a_grpo_step_masks_the_drifted_sequence_and_counts_it() -> None:
    model = _lora_model()
    packed = _packed(model)
    config, dev = _configs({"off_policy_correction": {"mode": "sequence_mask"}})
    optimizer = training.make_optimizer([p for p in model.parameters() if p.requires_grad])
    stats = training.train_on_packed(model, optimizer, packed, config, dev)
    assert stats.masked_sequences == 1 and stats.summary()["masked_sequences"] == 1.0
    # The same step without the correction, sequence 3's weights zeroed by hand.
    by_hand: Any = {**packed, "weights": packed["weights"] * (packed["group_ids"] != 3)}
    plain_config, plain_dev = _configs({})
    reference = _lora_model()
    optimizer = training.make_optimizer([p for p in reference.parameters() if p.requires_grad])
    expected = training.train_on_packed(reference, optimizer, by_hand, plain_config, plain_dev)
    assert stats.losses == pytest.approx(expected.losses, rel=1e-6)
    assert "masked_sequences" not in expected.summary()
