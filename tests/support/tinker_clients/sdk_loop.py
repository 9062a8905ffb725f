"""Run by the `tinker` SDK's own interpreter (a virtualenv of its own, made by the test):
a LoRA trained on one fixed supervised batch through forward_backward + optim_step, its
weights saved for sampling, and samples drawn from them and from the base model. Prints
one JSON object of what the test checks. Reads TINKER_BASE_URL and TINKER_API_KEY."""

from __future__ import annotations

import json
import sys

import tinker
from tinker import types

BASE_MODEL = sys.argv[1]
PROMPT = [1, 9690, 198, 2683, 359, 253, 5356, 5646, 28, 7018, 314, 2]


def batch() -> list[types.Datum]:
    """A fixed supervised batch: three short sequences, every position weighted."""
    rows = [[*PROMPT, 504, 1345, 314, 282], [*PROMPT[2:], 905, 30, 2], [*PROMPT[:6], 11, 12, 13]]
    return [
        types.Datum(
            model_input=types.ModelInput.from_ints(row[:-1]),
            loss_fn_inputs={"target_tokens": row[1:], "weights": [1.0] * (len(row) - 1)},
        )
        for row in rows
    ]


def sample(client: tinker.SamplingClient) -> list[dict[str, object]]:
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    result = client.sample(types.ModelInput.from_ints(PROMPT), 2, params).result()
    return [
        {"tokens": list(s.tokens), "logprobs": list(s.logprobs or []), "stop": s.stop_reason}
        for s in result.sequences
    ]


def rescored(
    training: tinker.TrainingClient, sequences: list[dict[str, object]]
) -> list[list[float]]:
    """The training client's own logprobs of sampled tokens (forward, no gradient)."""
    data = []
    for seq in sequences:
        tokens = list(seq["tokens"])  # type: ignore[call-overload]
        full = PROMPT + tokens
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(full[:-1]),
                loss_fn_inputs={"target_tokens": full[1:], "weights": [1.0] * (len(full) - 1)},
            )
        )
    out = training.forward(data, "cross_entropy").result()
    return [list(o["logprobs"].tolist())[len(PROMPT) - 1 :] for o in out.loss_fn_outputs]


def main() -> None:
    service = tinker.ServiceClient()
    capabilities = service.get_server_capabilities()
    training = service.create_lora_training_client(base_model=BASE_MODEL, rank=8, seed=0)
    losses = []
    for _ in range(4):
        result = training.forward_backward(batch(), "cross_entropy").result()
        losses.append(result.metrics["loss:sum"])
        training.optim_step(types.AdamParams(learning_rate=2e-3)).result()
    saved = training.save_weights_for_sampler("after").result()
    trained = service.create_sampling_client(model_path=saved.path)
    base = service.create_sampling_client(base_model=BASE_MODEL)
    trained_samples = sample(trained)
    state = training.save_state("state").result()
    runs = service.create_rest_client().list_checkpoints(training.model_id).result()
    print(
        json.dumps(
            {
                "models": [m.model_name for m in capabilities.supported_models],
                "model_id": training.model_id,
                "losses": losses,
                "sampler_path": saved.path,
                "state_path": state.path,
                "trained": trained_samples,
                "trained_rescored": rescored(training, trained_samples),
                "base": sample(base),
                "checkpoints": [c.checkpoint_id for c in runs.checkpoints],
            }
        )
    )


if __name__ == "__main__":
    main()
