"""Sampler/trainer logprob mismatch: the figures against hand-computed values, the shift
that lines positions up as ART's loss does, and a training step of a tiny Llama that
reports them (ratio exactly 1 where the sampler's logprobs are the trainer's own)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import torch
from peft import get_peft_model
from tiny_llama import tiny_llama

from artfleet_trainer.jobs.mismatch import FIGURES
from artfleet_trainer.torch_backend import mismatch, train_config, training

LN2 = math.log(2.0)


def test_figures_of_four_tokens_by_hand() -> None:
    # r = trainer - sampler; ratios 1/2, 1, 1, 2.
    r = torch.tensor([-LN2, 0.0, 0.0, LN2], dtype=torch.float64)
    got = mismatch.figures([r[:1], r[1:]])  # two rows' tokens, pooled
    assert got is not None
    assert got.tokens == 4
    assert got.abs_delta_mean == pytest.approx(LN2 / 2)
    # p99 of |r| = (0, 0, ln2, ln2) at position 0.99 * 3 = 2.97: between ln2 and ln2.
    assert got.abs_delta_p99 == pytest.approx(LN2)
    # k3 per token: 1/2 - 1 + ln2, 0, 0, 2 - 1 - ln2 -> sum 1/2, mean 1/8.
    assert got.k3 == pytest.approx(0.125)
    # Ratios sorted (0.5, 1, 1, 2): p1 at 0.03 -> 0.5 + 0.03 * 0.5; p50 at 1.5 -> 1;
    # p99 at 2.97 -> 1 + 0.97 * 1.
    assert got.ratio_p1 == pytest.approx(0.515)
    assert got.ratio_p50 == pytest.approx(1.0)
    assert got.ratio_p99 == pytest.approx(1.97)
    assert got.outside_0_9_1_1 == pytest.approx(0.5)  # 0.5 and 2


def test_only_tokens_past_the_wider_band_count_outside_it() -> None:
    r = torch.log(torch.tensor([0.49, 0.95, 1.05, 2.01, 1.2]))
    got = mismatch.figures([r])
    assert got is not None
    assert got.outside_0_9_1_1 == pytest.approx(3 / 5)  # 0.49, 2.01, 1.2
    assert got.outside_0_5_2 == pytest.approx(2 / 5)  # 0.49, 2.01
    assert got.ratio_p50 == pytest.approx(1.05)


def test_no_counted_token_has_no_figures() -> None:
    assert mismatch.figures([]) is None
    assert mismatch.figures([torch.zeros(0)]) is None


def test_the_metrics_names_are_the_summary_fields() -> None:
    names = [f.name for f in dataclasses.fields(mismatch.Mismatch)]
    assert tuple(names) == FIGURES
    got = mismatch.figures([torch.zeros(3)])
    assert got is not None
    assert got.metrics()["mismatch/tokens"] == 3.0 and got.metrics()["mismatch/k3"] == 0.0


def test_token_log_ratios_shift_like_arts_loss() -> None:
    # Position t of the trainer's logprobs scores token t+1: it meets the sampler's
    # logprob and mask of token t+1. Token 1 has no sampler logprob (NaN), token 3 is
    # not trained: only tokens 2 and 4 count.
    inputs = {
        "logprobs": torch.tensor([[math.nan, math.nan, -1.0, -2.0, -0.5]]),
        "assistant_mask": torch.tensor([[False, True, True, False, True]]),
    }
    trainer = torch.tensor([[-9.0, -1.25, -7.0, -0.5, -3.0]])
    got = mismatch.token_log_ratios(trainer, inputs)
    assert got.tolist() == [-0.25, 0.0]  # -1.25 - (-1.0); -0.5 - (-0.5)


def _lora_model() -> Any:
    with training.quiet_peft_wrap():
        model = get_peft_model(tiny_llama(64, tie_word_embeddings=True), training.lora_config(4))
    torch.manual_seed(1)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # the adapter changes the logits from the start
            torch.nn.init.normal_(param, std=0.05)
    return model


def _packed() -> Any:  # PackedTensors
    torch.manual_seed(2)
    tokens = torch.randint(1, 64, (2, 14))
    group_ids = torch.tensor([[1] * 4 + [2] * 5 + [3] * 5] * 2)
    assistant = group_ids > 1
    return {
        "tokens": tokens,
        "input_pos": torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7, 8]] * 2),
        "group_ids": group_ids,
        "parent_ids": torch.ones_like(group_ids),
        "assistant_mask": assistant,
        "logprobs": torch.full((2, 14), math.nan),
        "advantages": assistant * torch.tensor([[1.0], [-0.5]]),
        "weights": torch.ones(2, 14),
        "pixel_values": [None, None],
        "image_grid_thw": [None, None],
    }


def _as_sampled(model: Any, packed: Any) -> None:
    """The trainer's own logprobs as the sampler's, row by row as the step computes them."""
    model.eval()
    with torch.no_grad():
        for i in range(packed["tokens"].shape[0]):
            row = [packed[k][i : i + 1] for k in ("tokens", "input_pos", "group_ids", "parent_ids")]
            own, _ = training.compute_logprobs(model, *row)
            # Position t scores token t+1: that token's sampler logprob.
            packed["logprobs"][i, 1:] = torch.where(
                packed["assistant_mask"][i, 1:], own[0, :-1], math.nan
            )


def _step(model: Any, packed: Any) -> dict[str, float]:
    # Both rows before the one optimizer step: each is scored by the sampling policy.
    config, dev = train_config.build_train_configs(1e-3, {"grad_accumulation_sequences": 2})
    optimizer = training.make_optimizer([p for p in model.parameters() if p.requires_grad])
    return training.train_on_packed(model, optimizer, packed, config, dev).summary()


def test_a_step_on_its_own_logprobs_has_ratio_exactly_one() -> None:
    model, packed = _lora_model(), _packed()
    _as_sampled(model, packed)
    packed["logprobs"][1, 10] = math.nan  # a token the sampler gave no logprob: not counted
    stats = _step(model, packed)
    trained = int(packed["assistant_mask"][:, 1:].sum())
    assert stats["mismatch/tokens"] == trained - 1
    for name in ("ratio_p1", "ratio_p50", "ratio_p99"):
        assert stats[f"mismatch/{name}"] == 1.0
    assert stats["mismatch/abs_delta_mean"] == 0.0 and stats["mismatch/abs_delta_p99"] == 0.0
    assert stats["mismatch/k3"] == 0.0
    assert stats["mismatch/outside_0_9_1_1"] == 0.0 and stats["mismatch/outside_0_5_2"] == 0.0


def test_a_sampler_off_by_a_constant_shows_it() -> None:
    model, packed = _lora_model(), _packed()
    _as_sampled(model, packed)
    packed["logprobs"] -= 0.25  # the sampler gave every token e^-0.25 of the trainer's
    stats = _step(model, packed)
    assert stats["mismatch/ratio_p50"] == pytest.approx(math.exp(0.25), rel=1e-6)
    assert stats["mismatch/abs_delta_mean"] == pytest.approx(0.25, rel=1e-5)
    assert stats["mismatch/k3"] == pytest.approx(math.exp(0.25) - 1.25, rel=1e-5)
    assert stats["mismatch/outside_0_9_1_1"] == 1.0 and stats["mismatch/outside_0_5_2"] == 0.0


def test_a_step_without_sampler_logprobs_reports_no_mismatch() -> None:
    model, packed = _lora_model(), _packed()
    config, dev = train_config.build_train_configs(
        1e-3, {"allow_training_without_logprobs": True, "grad_accumulation_sequences": 2}
    )
    optimizer = training.make_optimizer([p for p in model.parameters() if p.requires_grad])
    stats = training.train_on_packed(model, optimizer, packed, config, dev).summary()
    assert not [k for k in stats if k.startswith("mismatch/")]


def test_rows_after_the_steps_first_update_are_not_counted() -> None:
    """One row per optimizer step: the second row is scored by weights the step moved,
    its difference from the sampler is learning, not a sampler that disagrees."""
    model, packed = _lora_model(), _packed()
    _as_sampled(model, packed)
    config, dev = train_config.build_train_configs(1e-2, {"grad_accumulation_sequences": 1})
    optimizer = training.make_optimizer([p for p in model.parameters() if p.requires_grad])
    stats = training.train_on_packed(model, optimizer, packed, config, dev).summary()
    assert stats["mismatch/tokens"] == int(packed["assistant_mask"][0, 1:].sum())
    assert stats["mismatch/ratio_p1"] == 1.0 and stats["mismatch/ratio_p99"] == 1.0
