"""Thinking on or off, and a reasoning parser's answers, on the rollout's side.

A task's `enable_thinking` reaches the endpoint as `chat_template_kwargs` (unset: nothing
is sent). With vLLM's `--reasoning-parser`, an answer's `<think>` block comes back as
`message.reasoning` beside `content` while its token ids stay the sampled ones; the next
turn sends the reasoning back, so the chat template can render the turn as sampled."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from local_http import serve_app
from openai.types.chat.chat_completion import Choice
from pydantic import SecretStr

from artfleet.contracts.art_types import art
from artfleet.contracts.codec import trajectory_from_proto, trajectory_to_proto
from artfleet.v1 import rollout_pb2
from artfleet_rollout.adapters import OpenAIClients, template_kwargs
from artfleet_rollout.agents.turns import Budget, ask_policy, history
from artfleet_rollout.settings import RolloutSettings

KEY = "policy-key-for-tests"


def _answer(turn: int) -> dict[str, Any]:
    """vLLM 0.32 with `--reasoning-parser qwen3`: the reasoning apart, every sampled id kept."""
    ids = [151667, 10 + turn, 151668, 20 + turn]  # <think> r </think> answer
    return {
        "id": f"chatcmpl-{turn}",
        "object": "chat.completion",
        "created": 1,
        "model": "agent@3",
        "prompt_token_ids": [1, 2, turn],
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": f"answer {turn}",
                    "reasoning": f"thought {turn}",
                },
                "logprobs": {
                    "content": [
                        {"token": f"token_id:{t}", "logprob": -0.1, "top_logprobs": []} for t in ids
                    ]
                },
                "token_ids": ids,
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response(_answer(len(seen)))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner, url = await serve_app(app)
    yield f"{url}/v1", seen
    await runner.cleanup()


def _task(url: str, **fields: Any) -> rollout_pb2.GroupTask:
    return rollout_pb2.GroupTask(
        model_base_url=url, policy="agent@3", max_tokens=16, temperature=0.7, **fields
    )


def test_only_a_task_that_sets_it_sends_template_kwargs() -> None:
    assert template_kwargs(_task("u", enable_thinking=False)) == {"enable_thinking": False}
    assert template_kwargs(_task("u", enable_thinking=True)) == {"enable_thinking": True}
    assert template_kwargs(_task("u")) == {}


@pytest.mark.parametrize("thinking", [None, False])
async def test_the_policy_call_sends_enable_thinking_and_the_reasoning_back(
    endpoint: tuple[str, list[dict[str, Any]]], thinking: bool | None
) -> None:
    url, seen = endpoint
    clients = OpenAIClients(RolloutSettings(api_token=SecretStr("t0k3n-for-tests")))
    task = _task(url) if thinking is None else _task(url, enable_thinking=thinking)
    policy = clients.policy(task, KEY)
    trajectory = art.Trajectory(messages_and_choices=[{"role": "user", "content": "go"}])
    budget = Budget(max_context_tokens=2048, max_tokens=16)
    try:
        first = await ask_policy(policy, trajectory, budget)
        trajectory.messages_and_choices += [first, {"role": "user", "content": "more"}]
        await ask_policy(policy, trajectory, budget)
    finally:
        await clients.close()

    if thinking is None:
        assert all("chat_template_kwargs" not in body for body in seen)
    else:
        assert all(body["chat_template_kwargs"] == {"enable_thinking": False} for body in seen)
    # include_reasoning false would make vLLM drop the ids and logprobs.
    assert all(b["return_token_ids"] is True and "include_reasoning" not in b for b in seen)
    assistant = seen[1]["messages"][1]
    assert assistant == {"role": "assistant", "content": "answer 1", "reasoning": "thought 1"}
    # What training reads is untouched: every sampled id, reasoning included.
    assert (first.model_extra or {})["token_ids"] == [151667, 11, 151668, 21]


def test_the_reasoning_survives_the_trajectory_codec() -> None:
    choice = Choice.model_validate(_answer(1)["choices"][0])
    trajectory = art.Trajectory(messages_and_choices=[{"role": "user", "content": "go"}, choice])
    back = trajectory_from_proto(trajectory_to_proto(trajectory))
    assert history(back)[1]["reasoning"] == "thought 1"
    assert history(back)[0] == {"role": "user", "content": "go"}
    # An answer without reasoning goes back as ART sends it.
    plain = json.loads(json.dumps(_answer(2)["choices"][0]))
    del plain["message"]["reasoning"]
    trajectory.messages_and_choices = [Choice.model_validate(plain)]
    assert history(trajectory) == trajectory.messages()
