"""The group's seed reaches every policy request: a task as the trainer's dispatcher sends
it, run by the group runner with the product's OpenAI policy against an HTTP endpoint on
port 0 that records each request body (as vLLM's server would receive it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from local_http import serve_app
from pydantic import SecretStr
from rollout_fakes import SUBMIT, FakeReward, FakeWorkspaces, bash, group_task

from artfleet.contracts import seeds
from artfleet.contracts.queue import decode_payload, encode_payload
from artfleet.v1 import rollout_pb2
from artfleet_rollout.adapters import OpenAIClients
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.ports import Connections
from artfleet_rollout.settings import RolloutSettings

TOKEN = "fleet-token-for-seed-tests"
ROLLOUTS = 3


def _answer(text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "agent@2",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": text},
                "logprobs": {
                    "content": [{"token": "token_id:7", "logprob": -0.1, "top_logprobs": []}]
                },
                "token_ids": [7],
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """Answers a command at an episode's first turn and `submit` after it."""
    bodies: list[dict[str, Any]] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        bodies.append(body)
        first_turn = len(body["messages"]) == len(bodies[0]["messages"])  # every prompt alike
        return web.json_response(_answer(bash("echo hi > hello.txt") if first_turn else SUBMIT))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner, url = await serve_app(app)
    yield f"{url}/v1", bodies
    await runner.cleanup()


async def _run(task: rollout_pb2.GroupTask, workspaces: FakeWorkspaces) -> None:
    settings = RolloutSettings(api_token=SecretStr(TOKEN), episode_retries=1)
    clients = OpenAIClients(settings)

    async def connect(_: object) -> Connections:
        return Connections(clients, workspaces, FakeReward(), clients.close)

    runner = GroupRunner(settings, connect=connect, environ={})
    await runner.start()
    try:
        response = await runner.run(task)
    finally:
        await runner.stop()
    assert len(response.group.trajectories) == ROLLOUTS


def _dispatched(url: str, group_seed: int) -> rollout_pb2.GroupTask:
    """The task through the Celery payload, as a worker reads it."""
    task = group_task(model_base_url=url, rollouts=ROLLOUTS, seed=group_seed)
    return rollout_pb2.GroupTask.FromString(
        decode_payload(encode_payload(task.SerializeToString()))
    )


def _expected(group_seed: int, calls: int) -> list[int]:
    return sorted(
        seeds.call_seed(seeds.rollout_seed(group_seed, rollout), call)
        for rollout in range(ROLLOUTS)
        for call in range(calls)
    )


async def test_each_policy_request_carries_its_rollouts_and_turns_seed(
    endpoint: tuple[str, list[dict[str, Any]]],
) -> None:
    url, bodies = endpoint
    group_seed = seeds.group_seed(7, 2, 1)
    await _run(_dispatched(url, group_seed), FakeWorkspaces())
    # Two turns an episode: each request its own seed, from the rollout's and the turn.
    assert len(bodies) == 2 * ROLLOUTS
    sent = sorted(body["seed"] for body in bodies)
    assert sent == _expected(group_seed, calls=2)
    assert len(set(sent)) == len(sent)


async def test_an_episode_started_again_seeds_its_calls_from_the_first_again(
    endpoint: tuple[str, list[dict[str, Any]]],
) -> None:
    url, bodies = endpoint
    group_seed = seeds.group_seed(7, 2, 1)
    # The first command finds its workspace lost: that episode runs again from scratch.
    await _run(_dispatched(url, group_seed), FakeWorkspaces(losses=1))
    sent = sorted(body["seed"] for body in bodies)
    first_calls = {seeds.call_seed(seeds.rollout_seed(group_seed, r), 0) for r in range(ROLLOUTS)}
    assert len(bodies) == 2 * ROLLOUTS + 1  # the lost attempt's one call, then a whole episode
    again = [s for s in sent if sent.count(s) == 2]
    assert len(again) == 2 and again[0] in first_calls  # its first call's seed, sent again
    assert sorted(set(sent)) == _expected(group_seed, calls=2)
