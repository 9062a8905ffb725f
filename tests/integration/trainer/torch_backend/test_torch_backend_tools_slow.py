"""Tool calling with the real SmolLM2-135M through the torch server and the OpenAI client:
`required` turns are schema-valid calls, and ART trains on exactly their tokens."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import pytest_asyncio
from openai import AsyncOpenAI

from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import train_config, training
from artfleet_trainer.torch_backend.backend import TorchBackend

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

KEY = "tools-slow-key"
MOVE = {
    "type": "object",
    "properties": {"direction": {"type": "string", "enum": ["up", "down", "left", "right"]}},
    "required": ["direction"],
}
TOOLS: Any = [
    {
        "type": "function",
        "function": {"name": "move", "description": "Slide the tiles.", "parameters": MOVE},
    }
]
MESSAGES: Any = [{"role": "user", "content": "Board:\n2 0 0 2\n0 0 0 0\nMerge the two 2s."}]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(module_tmp: Callable[[str], Path]) -> AsyncIterator[tuple[Any, ...]]:
    backend = TorchBackend(path=str(module_tmp("art")), api_key=KEY)
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name="tools", project="it", base_model="smollm2-135m-instruct"
    )
    await model.register(backend)
    client = AsyncOpenAI(base_url=model.inference_base_url, api_key=KEY, max_retries=0)
    try:
        yield backend, model, client
    finally:
        await client.close()
        await backend.close()


async def test_required_calls_are_valid_and_train_on_their_tokens(
    served: tuple[Any, ...],
) -> None:
    backend, model, client = served
    response = await client.chat.completions.create(
        model=model.get_inference_name(),
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="required",
        n=4,
        max_tokens=64,
        logprobs=True,
        seed=5,
    )
    for choice in response.choices:
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls or []
        assert call.function.name == "move"
        jsonschema.validate(json.loads(call.function.arguments), MOVE)
    trajectories = [
        art.Trajectory(messages_and_choices=[*MESSAGES, choice], tools=TOOLS, reward=float(i))
        for i, choice in enumerate(response.choices)
    ]
    state = backend._states["tools"]
    _, dev_config = train_config.build_train_configs(5e-6, {})
    batch = training.pack_trajectory_groups(
        state.tokenizer, [art.TrajectoryGroup(trajectories)], dev_config, max_context=8192
    )
    assert batch is not None
    sampled = sum(len(c.logprobs.content) for c in response.choices if c.logprobs)
    # Every sampled token (the <tool_call> block and the end of turn) is trainable.
    assert int(batch.tensors["assistant_mask"].sum()) == sampled


async def test_auto_answers_with_or_without_calls(served: tuple[Any, ...]) -> None:
    _, model, client = served
    response = await client.chat.completions.create(
        model=model.get_inference_name(),
        messages=MESSAGES,
        tools=TOOLS,
        max_tokens=32,
        seed=1,
    )
    (choice,) = response.choices
    if choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
    else:
        assert choice.finish_reason in ("stop", "length") and choice.message.content is not None
