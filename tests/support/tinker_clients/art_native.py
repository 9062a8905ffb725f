"""Run by ART 0.5.18's own interpreter (openpipe-art with tinker 0.18.2 and
tinker-cookbook 0.3, a virtualenv of its own, made by the test): a tiny ART script on
`TinkerNativeBackend`. The model is registered (a LoRA on the fleet and its step-0
sampler weights), four rollouts of one question go through ART's own OpenAI server
(`model.openai_client()`: each chat completion a Tinker sample, its logprobs the
sampler's), are scored, and `backend.train` runs one step (forward_backward with ART's
default loss, cispo, then optim_step) and saves the step-1 sampler weights, which then
answer. Prints one JSON object of what the test checks. Reads TINKER_BASE_URL and
TINKER_API_KEY.

ART picks a renderer from hard-coded base-model prefixes and raises for SmolLM2's; its
supported override is the model's `_internal_config.tinker_native_args.renderer_name`,
here the SmolLM2 renderer of smollm2.py (registered with the cookbook, as is the local
tokenizer folder ART's `tokenizer_utils.get_tokenizer(base_model)` then reads).

argv: BASE_MODEL TOKENIZER_FOLDER ART_PATH"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import art
import smollm2
import tinker
from art.tinker_native import TinkerNativeBackend
from art.tinker_native.backend import ModelState
from art.tinker_native.data import extract_logprobs_from_choice
from openai.types.chat import ChatCompletionMessageParam

BASE_MODEL, TOKENIZER_FOLDER, ART_PATH = sys.argv[1:4]
QUESTION: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the capital of France? Answer in one word."}
]


def trainable_model() -> art.TrainableModel:
    return art.TrainableModel(
        name="smollm2-tinker-native",
        project="artfleet-tinker",
        base_model=BASE_MODEL,
        _internal_config=art.dev.InternalModelConfig(
            tinker_native_args=art.dev.TinkerNativeArgs(
                renderer_name=smollm2.RENDERER,
                training_client_args={"rank": 8, "seed": 0},
            )
        ),
    )


def reward(text: str) -> float:
    """Paris is right; shorter is better (the tie-breaker of a tiny group)."""
    return (1.0 if "paris" in text.lower() else 0.0) - 0.01 * len(text)


async def rollout(model: art.TrainableModel, seed: int) -> tuple[art.Trajectory, dict[str, Any]]:
    client = model.openai_client()
    completion = await client.chat.completions.create(
        model=model.get_inference_name(),
        messages=QUESTION,
        max_completion_tokens=12,
        seed=seed,
    )
    choice = completion.choices[0]
    logprobs = list(choice.logprobs.content or []) if choice.logprobs else []
    text = choice.message.content or ""
    facts = {
        "tokens": completion.usage.completion_tokens if completion.usage else 0,
        "logprobs": len(logprobs),
        "logprob_values": [lp.logprob for lp in logprobs],
        "finish_reason": choice.finish_reason,
        "text": text,
    }
    trajectory = art.Trajectory(messages_and_choices=[*QUESTION, choice], reward=reward(text))
    return trajectory, facts


async def rescored(state: ModelState, trajectory: art.Trajectory) -> list[float]:
    """The training client's logprobs of a rollout's sampled tokens (tinker 0.18's
    `forward`, POST /api/v1/forward), as ART would train on them."""
    choice = trajectory.messages_and_choices[-1]
    tokens, _ = extract_logprobs_from_choice(choice, state.tokenizer)  # type: ignore[arg-type]
    prompt = state.renderer.build_generation_prompt(QUESTION).to_ints()
    full = prompt + tokens
    datum = tinker.Datum(
        model_input=tinker.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": full[1:],
            "weights": [0.0] * (len(prompt) - 1) + [1.0] * len(tokens),
        },
    )
    future = await state.training_client.forward_async([datum], "cross_entropy")
    out = await future.result_async()
    return list(out.loss_fn_outputs[0]["logprobs"].tolist())[len(prompt) - 1 :]


async def register(backend: TinkerNativeBackend) -> art.TrainableModel:
    model = trainable_model()
    # ART's OpenAI server on loopback (it binds 0.0.0.0 by default)
    await model.register(backend, {"server_args": {"host": "127.0.0.1"}})
    return model


async def main() -> None:
    smollm2.register(TOKENIZER_FOLDER, BASE_MODEL)
    backend = TinkerNativeBackend(path=ART_PATH)
    model = await register(backend)
    state = backend._model_state[model.name]
    step_before = await model.get_step()
    name_before = model.get_inference_name()

    rollouts = await asyncio.gather(*(rollout(model, seed) for seed in range(4)))
    group = art.TrajectoryGroup([trajectory for trajectory, _ in rollouts])
    # save_checkpoint: the training state too (weights/step_000001), which a resume loads
    result = await backend.train(model, [group], learning_rate=1e-4, save_checkpoint=True)
    _, after = await rollout(model, seed=11)  # the step-1 sampler weights answer
    best = max(group.trajectories, key=lambda t: t.reward)
    best_rescored = await rescored(state, best)
    listed = await state.rest_client.list_checkpoints_async(state.training_client.model_id)
    await backend.close()

    # What a restarted ART script does: a new backend on the same path finds the step-1
    # training state on the server (list_checkpoints), loads it with its optimizer into a
    # new LoRA, saves sampler weights from it, and answers as the trained model did.
    resumed_backend = TinkerNativeBackend(path=ART_PATH)
    resumed_model = await register(resumed_backend)
    resumed_state = resumed_backend._model_state[resumed_model.name]
    _, resumed = await rollout(resumed_model, seed=11)
    await resumed_backend.close()
    print(
        json.dumps(
            {
                "model_id": state.training_client.model_id,
                "step_before": step_before,
                "name_before": name_before,
                "step_trained": result.step,
                "step_after": await model.get_step(),
                "name_after": model.get_inference_name(),
                "trajectories": len(group.trajectories),
                "rewards": [t.reward for t in group.trajectories],
                "choices": [facts for _, facts in rollouts],
                "best": rollouts[group.trajectories.index(best)][1],
                "best_rescored_after_step": best_rescored,
                "metrics": result.metrics,
                "sampler_paths": {str(k): v for k, v in state.sampler_checkpoint_paths.items()},
                "training_paths": {str(k): v for k, v in state.training_checkpoint_paths.items()},
                "server_checkpoints": [c.checkpoint_id for c in listed.checkpoints],
                "after_step": after,
                "resumed_step": await resumed_model.get_step(),
                "resumed_run_ids": resumed_state.tinker_run_ids,
                "resumed_sampler_path": resumed_state.sampler_checkpoint_paths[1],
                "resumed_after_step": resumed,
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
