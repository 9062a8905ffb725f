"""The OpenAI policy adapter: what it asks the endpoint for and what it makes of the answer.

The endpoint is an in-process HTTP transport answering as vLLM does with
`return_token_ids` (prompt ids on the response, token ids on each choice)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from openai import AsyncOpenAI
from pydantic import SecretStr

from artfleet.v1 import rollout_pb2
from artfleet_rollout.adapters import OpenAIClients, OpenAIPolicy
from artfleet_rollout.ports import Usage
from artfleet_rollout.settings import RolloutSettings

ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "agent@1",
    "prompt_token_ids": [1, 2, 3],
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "THOUGHT: hi"},
            "logprobs": {
                "content": [
                    {"token": "token_id:7", "logprob": -0.1, "bytes": None, "top_logprobs": []}
                ]
            },
            "token_ids": [7],
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


async def test_asks_for_logprobs_and_token_ids_and_keeps_them_on_the_choice() -> None:
    seen: list[dict[str, Any]] = []

    def endpoint(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        assert request.headers["authorization"] == "Bearer the-key"
        return httpx.Response(200, json=ANSWER)

    client = AsyncOpenAI(
        base_url="http://policy/v1",
        api_key="the-key",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(endpoint)),
    )
    policy = OpenAIPolicy(client, model="agent@1", temperature=0.7, max_tokens=32, timeout_s=5)
    turn = await policy.complete([{"role": "user", "content": "x"}])
    await client.close()

    (body,) = seen
    assert body["model"] == "agent@1" and body["logprobs"] is True
    assert body["return_token_ids"] is True
    assert (body["temperature"], body["max_tokens"]) == (0.7, 32)
    assert "tools" not in body
    extra = turn.choice.model_extra or {}
    assert extra["token_ids"] == [7] and extra["prompt_token_ids"] == [1, 2, 3]
    assert turn.choice.logprobs is not None and turn.choice.logprobs.content
    assert turn.usage == Usage(3, 1) and turn.usage.context_tokens == 4


async def test_clients_are_cached_per_endpoint_and_key() -> None:
    clients = OpenAIClients(RolloutSettings(api_token=SecretStr("t0k3n-for-tests")))
    task = rollout_pb2.GroupTask(model_base_url="http://a/v1", policy="p@1", max_tokens=8)
    one = clients.policy(task, "k1")
    assert clients.policy(task, "k1")._client is one._client
    assert clients.policy(task, "k2")._client is not one._client
    other = rollout_pb2.GroupTask(model_base_url="http://b/v1", policy="p@1", max_tokens=8)
    assert clients.policy(other, "k1")._client is not one._client
    await clients.close()
