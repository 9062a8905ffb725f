"""The learning guard: one step of the trainer moves each trained token's logprob as ART's
own step does, and the engine then serves exactly the trained policy.

On a frozen recorded batch (tests/fixtures/learning_guard: two groups of three trajectories
sampled by the torch engine from the tiny random Llama), `TorchBackend.train` (our
tokenization, packing, attention mask, chunked logprobs, rows, clipping and optimizer) is
compared with a reference step built in `learning_guard.reference_step` from ART's
tokenization, packing and `art.loss.loss_fn` on plain transformers + peft + torch AdamW,
from the same LoRA init (seed) at the same learning rate. Both in fp32 on a CPU: the
post-step logprobs of the 48 trained tokens agree within 1e-5 (measured: equal, since
Adam's first step moves each weight by about the rate in its gradient's sign). For that
same reason a loss scaled as a whole, or normalized over other tokens, moves nothing
differently: the gradient's norm (the step's `grad_norm`, before clipping) and the loss
are compared too. Then the trainer's own server, serving the checkpoint it just published,
scores a fixed completion exactly as the trainer's forward does (same code path in fp32:
within 1e-5)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from api_fleet import tiny_model
from learning_guard import (
    ReferenceStep,
    engine_logprobs,
    frozen_groups,
    lora_model,
    plain_logprobs,
    reference_step,
    sequences,
)
from transformers import AutoModelForCausalLM, AutoTokenizer

from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import TorchBackend, training

SEED, RANK, LEARNING_RATE = 7, 8, 1e-3
TOLERANCE = 1e-5  # fp32 on both sides: summation order only


@dataclass
class Guard:
    before: list[torch.Tensor]  # each trajectory's sampled tokens, before the step
    trainer: list[torch.Tensor]  # after the trainer's step
    reference: list[torch.Tensor]  # after the reference step
    metrics: dict[str, float]
    reference_loss: float
    reference_grad_norm: float
    start_equal: bool  # the two LoRA inits were the same
    served: list[float]  # the engine's logprobs of a fixed completion, at the new step
    trainer_served: list[float]  # the trainer's own forward of it (training.compute_logprobs)


@pytest.fixture(scope="module")
def guard(module_tmp: Callable[[str], Path]) -> Guard:
    base = tiny_model(module_tmp("guard") / "model")
    groups = frozen_groups()
    reference = lora_model(AutoModelForCausalLM.from_pretrained(base), RANK, SEED)
    with torch.no_grad():
        before = [plain_logprobs(reference, *s) for s in sequences(groups)]
    start = {k: v.detach().clone() for k, v in reference.named_parameters() if v.requires_grad}
    step = reference_step(reference, AutoTokenizer.from_pretrained(base), groups, LEARNING_RATE)
    with torch.no_grad():
        after = [plain_logprobs(reference, *s) for s in sequences(groups)]
    work = module_tmp("art")
    return asyncio.run(_trainer_side(base, work, before, after, step, start))


async def _trainer_side(
    base: Path, path: Path, before: list[torch.Tensor], after: list[torch.Tensor],
    step: ReferenceStep, start: dict[str, torch.Tensor],
) -> Guard:  # fmt: skip
    model: art.TrainableModel = art.TrainableModel(
        name="guard", project="guard", base_model=str(base),
        _internal_config=art.dev.InternalModelConfig(
            peft_args=art.dev.PeftArgs(r=RANK, lora_alpha=2 * RANK, random_state=SEED)
        ),
    )  # fmt: skip
    groups = frozen_groups()
    async with TorchBackend(path=str(path), num_threads=1, train_num_threads=1) as backend:
        await backend.register_model(model)
        tenant = backend.peft_model_of(model)
        start_equal = _same_values(start, tenant.adapter_state())
        result = await backend.train(model, groups, learning_rate=LEARNING_RATE)
        trained = await backend.run_on_torch_thread(_score, tenant, sequences(groups))
        url, key = await backend.sampling_endpoint()
        prompt, sampled = sequences(groups)[0]
        served_name = f"{model.name}@{result.step}"
        served = await asyncio.to_thread(engine_logprobs, url, key, served_name, prompt, sampled)
        own = await backend.run_on_torch_thread(_trainer_logprobs, tenant, prompt, sampled)
    return Guard(
        before, trained, after, dict(result.metrics), step.loss, step.grad_norm,
        start_equal, served, own,
    )  # fmt: skip


@torch.no_grad()
def _score(model: object, seqs: list[tuple[list[int], list[int]]]) -> list[torch.Tensor]:
    return [plain_logprobs(model, *s) for s in seqs]


@torch.no_grad()
def _trainer_logprobs(model: object, prompt: list[int], sampled: list[int]) -> list[float]:
    ids = torch.tensor([prompt + sampled])
    positions = torch.arange(ids.shape[1])[None]
    logprobs, _ = training.compute_logprobs(model, ids, positions, None, None)
    return logprobs[0, len(prompt) - 1 : -1].tolist()


def _same_values(start: dict[str, torch.Tensor], adapter: dict[str, torch.Tensor]) -> bool:
    """Same LoRA weights, named by module (peft names the adapter differently)."""

    def strip(name: str) -> str:
        return name.replace(".default", "").rsplit("base_model.model.", 1)[-1]

    ours = {strip(k): v for k, v in adapter.items()}
    theirs = {strip(k): v for k, v in start.items()}
    return ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_both_steps_start_from_the_same_adapter(guard: Guard) -> None:
    assert guard.start_equal, "the trainer's LoRA init is not the seed's (peft, ART's defaults)"


def test_trained_tokens_move_as_arts_step_moves_them(guard: Guard) -> None:
    moved = torch.cat(guard.trainer) - torch.cat(guard.before)
    expected = torch.cat(guard.reference) - torch.cat(guard.before)
    assert expected.abs().max() > 100 * TOLERANCE, "the reference step barely moved: no guard"
    off = (moved - expected).abs()
    worst = int(off.argmax())
    assert float(off.max()) < TOLERANCE, (
        f"trainer moved token logprobs by {moved[worst]:+.6f} where the reference moved them "
        f"by {expected[worst]:+.6f} (token {worst} of {moved.numel()}; mean move "
        f"{moved.mean():+.6f} vs {expected.mean():+.6f}, "
        f"{int((off > TOLERANCE).sum())} tokens off)"
    )


def test_the_steps_loss_and_gradient_are_arts(guard: Guard) -> None:
    loss, norm = guard.metrics["loss"], guard.metrics["grad_norm"]
    assert norm == pytest.approx(guard.reference_grad_norm, rel=1e-4), (
        f"trainer's gradient norm {norm:.6g} where the reference's is "
        f"{guard.reference_grad_norm:.6g} (before clipping)"
    )
    assert loss == pytest.approx(guard.reference_loss, rel=1e-4, abs=1e-7), (
        f"trainer's loss {loss:.6g} where the reference's is {guard.reference_loss:.6g}"
    )
    assert guard.metrics["num_gradient_steps"] == 1


def test_the_engine_serves_the_trained_checkpoint(guard: Guard) -> None:
    served, own = torch.tensor(guard.served), torch.tensor(guard.trainer_served)
    worst = float((served - own).abs().max())
    assert worst < TOLERANCE, (
        f"the torch engine scores the completion {guard.served} where the trainer's "
        f"checkpoint gives {guard.trainer_served} (max diff {worst:.2e})"
    )
