"""Run by the `tinker` SDK's own interpreter: one training client driven through calls the
API refuses (lengths that differ, token ids outside the vocabulary, an empty datum, a loss
or option it does not serve, degenerate sampling parameters), each followed by a good call
that must complete. A refused call used its seq_id on the client; the trainer must not
wait for it. Prints one JSON object: each refusal's status and message, and whether the
call after it completed. Reads TINKER_BASE_URL and TINKER_API_KEY."""

from __future__ import annotations

import json
import sys
from typing import Any

import tinker
from tinker import types

BASE_MODEL = sys.argv[1]
ROW = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 28, 7018, 314, 2]
WAIT_S = 120.0  # a call that has not completed by then is hanging


def datum(tokens: list[int], targets: list[int], weights: list[float] | None = None) -> Any:
    inputs: dict[str, Any] = {"target_tokens": targets}
    inputs["weights"] = weights if weights is not None else [1.0] * len(targets)
    return types.Datum(model_input=types.ModelInput.from_ints(tokens), loss_fn_inputs=inputs)


def good() -> list[Any]:
    return [datum(ROW[:-1], ROW[1:])]


def refused_calls(training: Any, sampler: Any, context: int) -> dict[str, Any]:
    """Each bad call, as the SDK sends it (a future whose result raises). `context`: the
    base model's, as get_server_capabilities reports it."""
    params = types.SamplingParams
    return {
        "lengths_differ": lambda: training.forward_backward(
            [datum(ROW[:-1], ROW[1:-1])], "cross_entropy"
        ),
        "target_outside_vocab": lambda: training.forward_backward(
            [datum(ROW[:-1], [*ROW[1:-1], 10**6])], "cross_entropy"
        ),
        "input_outside_vocab": lambda: training.forward_backward(
            [datum([10**6, *ROW[1:-1]], ROW[1:])], "cross_entropy"
        ),
        "empty_datum": lambda: training.forward_backward([datum([], [])], "cross_entropy"),
        "nan_weight": lambda: training.forward_backward(
            [datum(ROW[:-1], ROW[1:], [float("nan")] * (len(ROW) - 1))], "cross_entropy"
        ),
        "unknown_loss": lambda: training.forward_backward(good(), "dro"),
        "forward_unknown_loss": lambda: training.forward(good(), "dro"),
        "sample_max_tokens_0": lambda: sampler.sample(
            types.ModelInput.from_ints(ROW), 1, params(max_tokens=0)
        ),
        "sample_max_tokens_negative": lambda: sampler.sample(
            types.ModelInput.from_ints(ROW), 1, params(max_tokens=-4)
        ),
        "sample_past_context": lambda: sampler.sample(
            types.ModelInput.from_ints(ROW), 1, params(max_tokens=context - len(ROW) + 1)
        ),
    }


def main() -> None:
    service = tinker.ServiceClient()
    models = service.get_server_capabilities().supported_models
    context = next(m.max_context_length for m in models if m.model_name == BASE_MODEL)
    training = service.create_lora_training_client(base_model=BASE_MODEL, rank=4, seed=0)
    sampler = service.create_sampling_client(base_model=BASE_MODEL)
    out: dict[str, Any] = {"context": context}
    for name, call in refused_calls(training, sampler, context).items():
        try:
            call().result(timeout=WAIT_S)
            refusal: dict[str, Any] = {"refused": False}
        except Exception as exc:  # what the SDK raises for a 4xx (or a timeout: a hang)
            status = getattr(exc, "status_code", None)
            refusal = {"refused": True, "status": status, "error": f"{type(exc).__name__}: {exc}"}
        try:
            result = training.forward_backward(good(), "cross_entropy").result(timeout=WAIT_S)
            refusal["next_completed"] = result.metrics["loss:sum"] > 0
        except Exception as exc:
            refusal["next_completed"] = False
            refusal["next_error"] = f"{type(exc).__name__}: {exc}"
        out[name] = refusal
    step = training.optim_step(types.AdamParams(learning_rate=1e-3)).result(timeout=WAIT_S)
    out["optim_step_after"] = bool(step)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
