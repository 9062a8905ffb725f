"""The Tinker-compatible API's losses on datums (torch_backend/datum_training.py), on a tiny
random Llama with LoRA: each loss is its formula over the datum's target logprobs, packed
datums score as they do alone, and bad datums are refused naming the datum."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from peft import get_peft_model
from tiny_llama import tiny_llama

from artfleet.contracts.errors import InvalidArgument
from artfleet_trainer.torch_backend import datum_training, training
from artfleet_trainer.torch_backend.datum_training import Datum

VOCAB = 50


def _model() -> Any:
    torch.manual_seed(0)
    model = get_peft_model(tiny_llama(VOCAB), training.lora_config(4))
    model.eval()
    return model


def _datum(length: int, offset: int = 0, /, **inputs: list[float]) -> Datum:
    tokens = [(offset + 3 * i) % VOCAB for i in range(length)]
    targets = [(offset + 3 * i + 1) % VOCAB for i in range(length)]
    return Datum(tokens, targets, dict(inputs))


def _forward(model: Any, datums: list[Datum], loss_fn: str = "cross_entropy", **config: float):
    spec = datum_training.check(datums, loss_fn, config, 256)
    outputs = datum_training.run(model, datums, spec, config, None)
    return outputs


def test_packed_datums_score_as_they_do_alone() -> None:
    model = _model()
    datums = [_datum(5), _datum(7, 1), _datum(3, 2)]
    together = _forward(model, datums)
    assert [[u.members for u in row] for row in datum_training.pack(datums)] == [[[0], [1], [2]]]
    for index, datum in enumerate(datums):
        alone = _forward(model, [datum])
        torch.testing.assert_close(
            torch.tensor(together.logprobs[index]),
            torch.tensor(alone.logprobs[0]),
            atol=1e-5,
            rtol=1e-5,
        )
    assert [len(lp) for lp in together.logprobs] == [5, 7, 3]
    assert all(v < 0 for lp in together.logprobs for v in lp)


def test_each_loss_is_its_formula_over_the_target_logprobs() -> None:
    model = _model()
    base = _forward(model, [_datum(4)])
    lp = torch.tensor(base.logprobs[0])
    weights = [0.0, 1.0, 0.5, 1.0]
    ce = _forward(model, [_datum(4, weights=weights)])
    assert ce.loss_sum == pytest.approx(float(-(lp * torch.tensor(weights)).sum()), rel=1e-5)
    advantages = [1.0, -1.0, 2.0, 0.5]
    # sampled with these very logprobs: every ratio is 1
    sampled: dict[str, list[float]] = {"logprobs": lp.tolist(), "advantages": advantages}
    for loss_fn in ("importance_sampling", "ppo", "cispo"):
        out = _forward(model, [_datum(4, **sampled)], loss_fn)
        expected = (
            -sum(advantages)
            if loss_fn != "cispo"
            else float(-(lp * torch.tensor(advantages)).sum())
        )
        assert out.loss_sum == pytest.approx(expected, rel=1e-5), loss_fn
    # far-off sampler logprobs: PPO clips the ratio at its threshold for positive advantages
    stale: dict[str, list[float]] = {"logprobs": (lp - 2.0).tolist(), "advantages": [1.0] * 4}
    ppo = _forward(model, [_datum(4, **stale)], "ppo", clip_high_threshold=1.5)
    assert ppo.loss_sum == pytest.approx(-4 * 1.5, rel=1e-5)


def test_forward_backward_accumulates_until_the_optimizer_steps() -> None:
    model = _model()
    datum = _datum(6, weights=[1.0] * 6)
    spec = datum_training.check([datum], "cross_entropy", {}, 256)
    memory = training.StepMemory.measure(model, {})
    optimizer = training.make_optimizer([p for p in model.parameters() if p.requires_grad])
    before = _forward(model, [_datum(6)]).loss_sum
    for _ in range(3):
        datum_training.run(model, [datum], spec, {}, memory)
        training.optim_step(optimizer, 0.05, training.StepStats(), max_grad_norm=0.0)
    after = _forward(model, [_datum(6)]).loss_sum
    assert after < before


@pytest.mark.parametrize(
    ("datums", "loss_fn", "config", "names"),
    [
        ([_datum(3)], "dro", {}, "loss_fn"),
        ([_datum(3, weights=[1.0, math.nan, 1.0])], "cross_entropy", {}, "data[0]"),
        ([_datum(3), _datum(3, weights=[1.0, 1.0])], "cross_entropy", {}, "data[1]"),
        ([_datum(300)], "cross_entropy", {}, "data[0]"),
        ([_datum(3, advantages=[1.0] * 3)], "importance_sampling", {}, "logprobs"),
        ([_datum(3, mask=[1.0] * 3)], "cross_entropy", {}, "mask"),
        ([_datum(3)], "ppo", {"beta": 0.1}, "loss_fn_config"),
        ([_datum(3)], "ppo", {"clip_low_threshold": math.inf}, "loss_fn_config"),
    ],
)
def test_bad_datums_are_refused_naming_what(
    datums: list[Datum], loss_fn: str, config: dict[str, float], names: str
) -> None:
    with pytest.raises(InvalidArgument, match=names.replace("[", r"\[")):
        datum_training.check(datums, loss_fn, config, 256)


def test_datums_that_begin_alike_share_their_beginning_and_score_as_alone() -> None:
    """An RL group: one prompt, several completions. The prompt is computed once; every
    datum's logprobs and the loss's gradient are those of the datums run one by one."""
    model = _model()
    prompt = [(7 * i) % VOCAB for i in range(12)]
    datums = []
    for k in range(3):
        full = prompt + [(k + 5 * i) % VOCAB for i in range(1, 6 + k)]
        datums.append(
            Datum(
                full[:-1],
                full[1:],
                {"logprobs": [0.0] * (len(full) - 1), "advantages": [1.0] * (len(full) - 1)},
            )
        )
    [[unit]] = datum_training.pack(datums)
    assert unit.members == [0, 1, 2] and unit.shared == len(prompt) - 1
    assert unit.size(datums) < sum(len(d.tokens) for d in datums)
    together = _forward(model, datums, "importance_sampling")
    alone = [_forward(model, [d], "importance_sampling") for d in datums]
    for index, single in enumerate(alone):
        torch.testing.assert_close(
            torch.tensor(together.logprobs[index]),
            torch.tensor(single.logprobs[0]),
            atol=1e-5,
            rtol=1e-5,
        )
    spec = datum_training.check(datums, "importance_sampling", {}, 256)
    memory = training.StepMemory.measure(model, {})

    def grads(batches: list[list[Datum]]) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        for batch in batches:
            datum_training.run(model, batch, spec, {}, memory)
        return [
            p.grad.clone() for p in model.parameters() if p.requires_grad and p.grad is not None
        ]

    for a, b in zip(grads([datums]), grads([[d] for d in datums]), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
