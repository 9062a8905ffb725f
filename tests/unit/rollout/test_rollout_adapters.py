"""The OpenAI policy adapter: what it asks the endpoint for and what it makes of the answer.

The endpoint is an in-process HTTP transport answering as vLLM does with
`return_token_ids` (prompt ids on the response, token ids on each choice)."""

from __future__ import annotations

import json
import ssl
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI, BadRequestError
from openai.resources.chat.completions import completions as completions_module
from pydantic import SecretStr

from artfleet.contracts.art_types import art
from artfleet.v1 import rollout_pb2
from artfleet_rollout.adapters import OpenAIClients, OpenAIPolicy, check_policy
from artfleet_rollout.agents.turns import Conversation
from artfleet_rollout.ports import ContextOverflow, EncodedList, Usage
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
    # The full distribution, explicitly: vLLM would fill what is left out from the model's
    # generation_config.json (Qwen3's top_p 0.95, top_k 20).
    assert (body["top_p"], body["top_k"], body["min_p"]) == (1.0, 0, 0.0)
    assert "tools" not in body
    extra = turn.choice.model_extra or {}
    assert extra["token_ids"] == [7] and extra["prompt_token_ids"] == [1, 2, 3]
    assert turn.choice.logprobs is not None and turn.choice.logprobs.content
    assert turn.usage == Usage(3, 1) and turn.usage.context_tokens == 4


async def test_clients_are_cached_per_endpoint_and_key() -> None:
    clients = OpenAIClients(RolloutSettings(api_token=SecretStr("t0k3n-for-tests")))
    task = rollout_pb2.GroupTask(model_base_url="http://a/v1", policy="p@1", max_tokens=8)
    one = clients.policy(task, "k1")
    assert clients.policy(task, "k1")._replicas is one._replicas
    assert clients.policy(task, "k2")._replicas is not one._replicas
    other = rollout_pb2.GroupTask(model_base_url="http://b/v1", policy="p@1", max_tokens=8)
    assert clients.policy(other, "k1")._replicas is not one._replicas
    await clients.close()


TOOL_ANSWER = {
    **ANSWER,
    "choices": [
        {
            **ANSWER["choices"][0],  # type: ignore[index]
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                    }
                ],
            },
        }
    ],
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run one command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def recording_client(seen: list[httpx.Request]) -> AsyncOpenAI:
    def endpoint(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=TOOL_ANSWER)

    return AsyncOpenAI(
        base_url="http://policy/v1",
        api_key="the-key",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(endpoint)),
    )


async def _tool_history(policy: OpenAIPolicy, system: str) -> art.Trajectory:
    """A history with a tool call the policy answered (its first request) and the result."""
    first = await policy.complete([{"role": "user", "content": "x"}], tools=TOOLS)
    return art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": system},
            {"role": "user", "content": "x"},
            first.choice,
            {"role": "tool", "tool_call_id": "call_1", "content": "a\nb"},
        ],
        tools=TOOLS,
    )


async def test_sends_what_the_sdks_create_sends_for_a_tool_history() -> None:
    seen: list[httpx.Request] = []
    client = recording_client(seen)
    policy = OpenAIPolicy(client, model="agent@1", temperature=0.7, max_tokens=32, timeout_s=5)
    history = (await _tool_history(policy, system="s")).messages()
    ours = await policy.complete(history, tools=TOOLS, tool_choice="required")
    await client.chat.completions.create(
        model="agent@1",
        messages=history,
        temperature=0.7,
        top_p=1.0,
        max_tokens=32,
        logprobs=True,
        timeout=5,
        extra_body={"return_token_ids": True, "top_k": 0, "min_p": 0.0},
        tools=TOOLS,
        tool_choice="required",
    )
    await client.close()

    sent, by_sdk = seen[1], seen[2]
    assert json.loads(sent.content) == json.loads(by_sdk.content)
    assert sent.url == by_sdk.url and sent.method == "POST"
    assert sent.headers["authorization"] == by_sdk.headers["authorization"] == "Bearer the-key"
    assert sent.headers["content-type"] == by_sdk.headers["content-type"]
    assert sent.extensions["timeout"] == by_sdk.extensions["timeout"]
    assert ours.choice.message.tool_calls and ours.choice.message.tool_calls[0].id == "call_1"
    assert (ours.choice.model_extra or {})["prompt_token_ids"] == [1, 2, 3]


async def test_the_request_skips_the_sdks_per_call_transform(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The transform walks the whole history on every turn and changes nothing in it.
    async def walked(*_: Any, **__: Any) -> Any:
        raise AssertionError("the request went through the SDK's param transform")

    monkeypatch.setattr(completions_module, "async_maybe_transform", walked)
    seen: list[httpx.Request] = []
    client = recording_client(seen)
    policy = OpenAIPolicy(client, model="agent@1", temperature=0.7, max_tokens=32, timeout_s=5)
    turn = await policy.complete([{"role": "user", "content": "x"}], tools=TOOLS)
    await client.close()
    assert turn.choice.finish_reason == "tool_calls" and len(seen) == 1


async def test_an_encoded_history_is_sent_as_the_same_json() -> None:
    seen: list[httpx.Request] = []
    client = recording_client(seen)
    policy = OpenAIPolicy(client, model="agent@1", temperature=0.7, max_tokens=32, timeout_s=5)
    trajectory = await _tool_history(policy, system="s é")
    conversation = Conversation()
    encoded = conversation.messages(trajectory)
    tools = conversation.tools(trajectory)
    assert isinstance(encoded, EncodedList) and isinstance(tools, EncodedList)
    await policy.complete(encoded, tools=tools, tool_choice="required")
    await policy.complete(trajectory.messages(), tools=TOOLS, tool_choice="required")
    await client.close()
    from_cache, plain = seen[1], seen[2]
    assert json.loads(from_cache.content) == json.loads(plain.content)
    assert from_cache.headers["content-type"] == "application/json"


async def test_policy_probes_share_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    # Reading the CA bundle into a new context for every probe's client took 0.1 s and
    # more of the event loop on a busy host, with a probe every few seconds.
    made: list[object] = []
    real = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    for _ in range(3):
        answer = await check_policy("http://127.0.0.1:9/v1", "agent@1", "k", timeout_s=2)
        assert not answer.reachable and answer.error
    assert len(made) <= 1


def _answering(status: int, body: dict[str, Any], seen: list[dict[str, Any]]) -> AsyncOpenAI:
    def endpoint(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(status, json=body)

    return AsyncOpenAI(
        base_url="http://policy/v1",
        api_key="k",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(endpoint)),
    )


# vLLM 0.32's words (renderers/params.py, v1/engine/input_processor.py), and OpenAI's code.
VLLM_CONTEXT = "This model's maximum context length is 2048 tokens. However, your prompt contains"
VLLM_MODEL_LEN = "The decoder prompt (length 2100) is longer than the maximum model length of 2048."


@pytest.mark.parametrize(
    "error",
    [
        {"message": VLLM_CONTEXT, "type": "BadRequestError", "code": 400},
        {"message": VLLM_MODEL_LEN, "type": "BadRequestError", "code": 400},
        {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"},
    ],
)
async def test_a_prompt_past_the_context_is_a_context_overflow(error: dict[str, Any]) -> None:
    seen: list[dict[str, Any]] = []
    client = _answering(400, {"error": error}, seen)
    policy = OpenAIPolicy(client, model="agent@1", temperature=0.7, max_tokens=32, timeout_s=5)
    with pytest.raises(ContextOverflow, match="HTTP 400"):
        await policy.complete([{"role": "user", "content": "x"}])
    await client.close()


async def test_another_400_stays_an_error() -> None:
    client = _answering(400, {"error": {"message": "bad tool_choice"}}, [])
    policy = OpenAIPolicy(client, model="agent@1", temperature=0.7, max_tokens=32, timeout_s=5)
    with pytest.raises(BadRequestError):
        await policy.complete([{"role": "user", "content": "x"}])
    await client.close()


async def test_a_calls_own_completion_limit_is_sent_up_to_the_tasks() -> None:
    seen: list[dict[str, Any]] = []
    client = _answering(200, ANSWER, seen)
    policy = OpenAIPolicy(client, model="agent@1", temperature=0.7, max_tokens=32, timeout_s=5)
    for asked in (None, 8, 500):
        await policy.complete([{"role": "user", "content": "x"}], max_tokens=asked)
    await client.close()
    assert [body["max_tokens"] for body in seen] == [32, 8, 32]
