"""Per-row activation checkpointing: the plan's rules, and the same loss and gradients
whichever layers and logits are recomputed (tiny random Llama + LoRA)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from peft import get_peft_model
from tiny_llama import tiny_llama

from artfleet_trainer.torch_backend import activation_memory, train_config, training
from artfleet_trainer.torch_backend.activation_memory import ActivationSizes, RowPlan
from artfleet_trainer.torch_backend.ranks import Share

SIZES = ActivationSizes(layers=4, full_layer=100, checkpointed_layer=10, logits=50)


def test_sizes_follow_the_model_config() -> None:
    config = tiny_llama(64).config  # hidden 32, 4 heads of 8, 2 kv heads, MLP 64
    sizes = ActivationSizes.of(config)
    assert sizes.layers == 2
    assert sizes.full_layer == 4 * (4 * 32 + 3 * 32 + 2 * 16 + 4 * 64)
    assert (sizes.checkpointed_layer, sizes.logits) == (4 * 32, 4 * 64)
    everything = RowPlan(2, checkpoint_logits=True)
    assert sizes.row_bytes(10, everything) == 10 * 2 * 4 * 32


def test_a_row_within_the_budget_recomputes_nothing() -> None:
    assert SIZES.row_bytes(10, RowPlan(0, False)) == 10 * (4 * 100 + 50)
    assert activation_memory.plan_row(10, SIZES, 4500) == RowPlan(0, False)


def test_a_larger_row_checkpoints_just_enough_layers() -> None:
    # 10 tokens keep 4500 bytes; each checkpointed layer frees 10 x 90.
    assert activation_memory.plan_row(10, SIZES, 4499) == RowPlan(1, False)
    assert activation_memory.plan_row(10, SIZES, 4500 - 900) == RowPlan(1, False)
    assert activation_memory.plan_row(10, SIZES, 4500 - 901) == RowPlan(2, False)
    plan = activation_memory.plan_row(10, SIZES, 1500)
    assert SIZES.row_bytes(10, plan) <= 1500
    assert SIZES.row_bytes(10, RowPlan(plan.checkpointed_layers - 1, False)) > 1500


def test_logits_are_recomputed_only_when_every_layer_is_not_enough() -> None:
    sizes = ActivationSizes(layers=4, full_layer=100, checkpointed_layer=10, logits=300)
    all_layers = sizes.row_bytes(10, RowPlan(4, False))  # 10 x (4 x 10 + 300) = 3400
    assert activation_memory.plan_row(10, sizes, all_layers) == RowPlan(4, False)
    # Recomputing the logits frees 3000: one checkpointed layer is then enough.
    assert activation_memory.plan_row(10, sizes, all_layers - 1) == RowPlan(1, True)
    assert activation_memory.plan_row(10, sizes, 1) == RowPlan(4, True)  # the least there is
    assert activation_memory.plan_row(10, sizes, 0) == RowPlan(4, True)  # 0: recompute all


def test_apply_plan_sets_each_layer() -> None:
    model = get_peft_model(tiny_llama(64), training.lora_config(4))
    assert activation_memory.checkpointed_layers(model) == 0
    activation_memory.apply_plan(model, RowPlan(1, False))
    assert activation_memory.checkpointed_layers(model) == 1
    activation_memory.apply_plan(model, RowPlan(2, True))
    assert activation_memory.checkpointed_layers(model) == 2
    activation_memory.apply_plan(model, RowPlan(0, False))
    assert activation_memory.checkpointed_layers(model) == 0


def _lora_model() -> Any:
    model = get_peft_model(tiny_llama(64, tie_word_embeddings=True), training.lora_config(4))
    torch.manual_seed(1)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # non-zero B: the adapter changes the logits from the start
            torch.nn.init.normal_(param, std=0.05)
    return model


def _row() -> dict[str, torch.Tensor]:
    torch.manual_seed(2)
    tokens = torch.randint(1, 64, (1, 14))
    group_ids = torch.tensor([[1] * 4 + [2] * 5 + [3] * 5])
    parent_ids = torch.ones_like(group_ids)
    input_pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 4, 5, 6, 7, 8]])
    return {
        "tokens": tokens,
        "input_pos": input_pos,
        "group_ids": group_ids,
        "parent_ids": parent_ids,
    }


@pytest.mark.parametrize(
    "plan", [RowPlan(1, False), RowPlan(2, False), RowPlan(2, True), RowPlan(0, True)]
)
def test_recomputing_gives_the_same_loss_and_gradients(plan: RowPlan) -> None:
    row = _row()
    weights = torch.linspace(-1, 1, 14)[None]

    def loss_and_grads(model: Any, plan: RowPlan) -> tuple[torch.Tensor, list[torch.Tensor]]:
        activation_memory.apply_plan(model, plan)
        model.train()
        logprobs, _ = training.compute_logprobs(
            model, *row.values(), chunk_size=5, checkpoint_chunks=plan.checkpoint_logits
        )
        loss = (logprobs * weights).sum()
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters() if p.requires_grad]
        model.zero_grad(set_to_none=True)
        return loss.detach(), grads

    model = _lora_model()
    kept_loss, kept_grads = loss_and_grads(model, RowPlan(0, False))
    loss, grads = loss_and_grads(model, plan)
    torch.testing.assert_close(loss, kept_loss, atol=1e-6, rtol=1e-6)
    assert len(grads) == len(kept_grads) > 0
    for grad, kept in zip(grads, kept_grads, strict=True):
        torch.testing.assert_close(grad, kept, atol=1e-6, rtol=1e-5)
    assert any(bool(g.abs().sum() > 0) for g in grads)


def _packed() -> Any:
    row = _row()
    torch.manual_seed(3)
    assistant = (row["group_ids"] > 1).long()
    tensors = {
        **{k: torch.cat([v, v.flip(1) if k == "tokens" else v]) for k, v in row.items()},
        "assistant_mask": torch.cat([assistant, assistant]).bool(),
        "logprobs": torch.rand(2, 14) * -3,
        "advantages": torch.cat([assistant * 1.0, assistant * -0.5]),
        "weights": torch.ones(2, 14),
    }
    return {**tensors, "pixel_values": [None, None], "image_grid_thw": [None, None]}


def test_a_train_step_is_the_same_under_any_budget() -> None:
    packed = _packed()
    config, dev = train_config.build_train_configs(1e-3, {})
    # Everything kept; everything recomputed; one of the two layers checkpointed.
    partial = ActivationSizes.of(tiny_llama(64).config).row_bytes(14, RowPlan(1, False))
    results = []
    for budget in (1 << 40, 0, partial):
        model = _lora_model()
        optimizer = training.make_optimizer([p for p in model.parameters() if p.requires_grad])
        stats = training.train_on_packed(
            model, optimizer, packed, config, dev, activation_budget_bytes=budget
        )
        lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora" in n}
        results.append((stats, lora))
    (kept_stats, kept_lora), *others = results
    for stats, lora in others:
        assert stats.losses == pytest.approx(kept_stats.losses, rel=1e-5, abs=1e-6)
        assert stats.grad_norms == pytest.approx(kept_stats.grad_norms, rel=1e-5)
        for name, value in lora.items():
            torch.testing.assert_close(value, kept_lora[name], atol=1e-6, rtol=1e-5)
    initial = {n: p for n, p in _lora_model().named_parameters() if "lora_A" in n}
    assert any(not torch.equal(kept_lora[n], p) for n, p in initial.items())  # it trained


# --- the training primitives ----------------------------------------------------------


def _trained(step: Callable[[Any, torch.optim.Optimizer], training.StepStats]) -> tuple[
    training.StepStats, dict[str, torch.Tensor]
]:  # fmt: skip
    model = _lora_model()
    optimizer = training.make_optimizer([p for p in model.parameters() if p.requires_grad])
    stats = step(model, optimizer)
    return stats, {n: p.detach().clone() for n, p in model.named_parameters() if "lora" in n}


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name, value in a.items():
        torch.testing.assert_close(value, b[name], atol=0, rtol=0)


def test_a_grpo_step_is_its_composition_from_the_primitives() -> None:
    """train_on_packed == forward_backward + optim_step per batch of rows, to the bit."""
    packed = _packed()
    config, dev = train_config.build_train_configs(1e-3, {})
    grpo, grpo_lora = _trained(
        lambda model, opt: training.train_on_packed(model, opt, packed, config, dev)
    )

    def composed(model: Any, optimizer: torch.optim.Optimizer) -> training.StepStats:
        stats = training.StepStats()
        memory = training.StepMemory.measure(model, dev)
        grpo = training.GrpoRows(model, packed, config, dev, stats)
        for row in (0, 1):  # grad_accumulation_sequences=1: a step per row
            training.forward_backward(model, grpo.rows([Share(row)]), memory, stats)
            training.optim_step(optimizer, config.learning_rate * grpo.multiplier_of(row), stats)
        return stats

    stats, lora = _trained(composed)
    assert stats.losses == grpo.losses and stats.grad_norms == grpo.grad_norms
    assert len(stats.grad_norms) == 2
    _assert_same(lora, grpo_lora)


def test_gradients_accumulate_across_forward_backward_calls_until_optim_step() -> None:
    packed = _packed()
    config, dev = train_config.build_train_configs(1e-3, {})

    def step(calls: list[list[int]]) -> Callable[[Any, torch.optim.Optimizer], Any]:
        def run(model: Any, optimizer: torch.optim.Optimizer) -> training.StepStats:
            stats = training.StepStats()
            memory = training.StepMemory.measure(model, dev)
            grpo = training.GrpoRows(model, packed, config, dev, stats)
            for rows in calls:
                training.forward_backward(
                    model, grpo.rows([Share(r) for r in rows]), memory, stats, scale=0.5
                )
            training.optim_step(optimizer, 1e-3, stats)
            return stats

        return run

    together, together_lora = _trained(step([[0, 1]]))
    apart, apart_lora = _trained(step([[0], [1]]))
    assert apart.losses == together.losses and len(apart.grad_norms) == 1
    for name, value in apart_lora.items():
        torch.testing.assert_close(value, together_lora[name], atol=1e-7, rtol=1e-6)
    initial = {n: p for n, p in _lora_model().named_parameters() if "lora_A" in n}
    assert any(not torch.equal(apart_lora[n], p) for n, p in initial.items())  # it trained
