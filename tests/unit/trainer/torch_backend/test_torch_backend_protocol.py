"""The OpenAI wire format of the torch backend's server: validation and response shape."""

from __future__ import annotations

import math
from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from artfleet.contracts.checkpoint_layout import parse_model_name
from artfleet_trainer.torch_serving.generation import SamplingParams, SequenceOutput
from artfleet_trainer.torch_serving.protocol import (
    MIN_LOGPROB,
    RequestError,
    ResponseFormat,
    chat_completion,
    model_list,
    parse_chat_request,
    token_entry,
)

MESSAGES = [{"role": "user", "content": "hi"}]
TEXTS = {5: "Hello", 7: " wor:ld", 9: "\ufffd", 2: "<|im_end|>"}


def token_text(token_id: int) -> str:
    return TEXTS.get(token_id, f"<{token_id}>")


def parse(**body: Any) -> Any:
    return parse_chat_request(
        {"model": "agent@0", "messages": MESSAGES, **body}, default_max_tokens=77
    )


def test_minimal_request_gets_openai_defaults() -> None:
    chat = parse()
    assert chat.model == "agent@0"
    assert chat.messages == MESSAGES
    assert chat.logprobs is False
    assert chat.params == SamplingParams(n=1, temperature=1.0, top_p=1.0, max_tokens=77)


def test_all_sampling_fields_are_read() -> None:
    chat = parse(
        n=3,
        temperature=0,
        top_p=0.5,
        max_tokens=5,
        stop=["\n", ""],
        seed=4,
        logprobs=True,
        top_logprobs=2,
    )
    assert chat.params == SamplingParams(
        n=3, temperature=0.0, top_p=0.5, max_tokens=5, stop=("\n",), seed=4, top_logprobs=2
    )
    assert chat.logprobs is True


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert parse(max_tokens=5, max_completion_tokens=9).params.max_tokens == 9
    assert parse(stop="END").params.stop == ("END",)


def test_content_parts_are_joined_and_missing_content_is_empty() -> None:
    chat = parse(
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {"role": "assistant", "content": None, "tool_calls": []},
        ]
    )
    assert [m["content"] for m in chat.messages] == ["ab", ""]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 0}, "n"),
        ({"n": True}, "n"),
        ({"n": 1000}, "n"),
        ({"temperature": 3}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": 5}, "stop"),
        ({"seed": 1.5}, "seed"),
        ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs: true
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"stream": True}, "stream"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"model": ""}, "model"),
        ({"response_format": "json"}, "response_format"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema.schema",
        ),
        ({"structured_outputs": {"regex": "a+"}}, "structured_outputs"),
        ({"structured_outputs": {"json": "{nope"}}, "structured_outputs"),
        (
            {"response_format": {"type": "json_object"}, "structured_outputs": {"json": {}}},
            "structured_outputs",
        ),
    ],
)
def test_invalid_fields_are_400_with_the_param(body: dict[str, Any], param: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse(**body)
    assert caught.value.status == 400
    assert caught.value.param == param
    error = caught.value.body()["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert error["type"] == "invalid_request_error"


def test_response_formats() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert parse().response_format is None
    assert parse(response_format={"type": "text"}).response_format is None
    assert parse(response_format={"type": "json_object"}).response_format == ResponseFormat(
        "json_object"
    )
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    assert parse(response_format=fmt).response_format == ResponseFormat("json_schema", schema)
    # vLLM's extension, as an object or as JSON text.
    expected = ResponseFormat("json_schema", schema)
    assert parse(structured_outputs={"json": schema}).response_format == expected
    assert (
        parse(
            structured_outputs={
                "json": '{"type": "object", "properties": {"a": {"type": "integer"}}}'
            }
        ).response_format
        == expected
    )


def test_non_object_body_is_400() -> None:
    with pytest.raises(RequestError) as caught:
        parse_chat_request(["not", "an", "object"], default_max_tokens=1)
    assert caught.value.status == 400


def test_model_names() -> None:
    assert parse_model_name("agent@12") == ("agent", 12)
    assert parse_model_name("agent") == ("agent", None)
    assert parse_model_name("team@agent@3") == ("team@agent", 3)
    assert parse_model_name("agent@latest") == ("agent", "latest")


def test_token_entries_name_token_ids_and_carry_valid_utf8_bytes() -> None:
    entry = token_entry(7, -0.25, token_text)
    assert entry == {"token": "token_id:7", "logprob": -0.25, "bytes": list(b" wor:ld")}
    # ART parses the id after the colon: a piece with its own colon must not confuse it.
    assert int(entry["token"].split(":")[1]) == 7
    assert bytes(token_entry(9, -1.0, token_text)["bytes"]).decode("utf-8") == "\ufffd"
    assert token_entry(5, -math.inf, token_text)["logprob"] == MIN_LOGPROB


def test_chat_completion_matches_openai_schema() -> None:
    outputs = [
        SequenceOutput(
            token_ids=[5, 7, 2],
            logprobs=[-0.1, -0.2, -0.3],
            top_logprobs=[[(5, -0.1), (9, -2.0)], [(7, -0.2), (5, -3.0)], [(2, -0.3), (5, -4.0)]],
            text="Hello wor:ld",
            finish_reason="stop",
        ),
        SequenceOutput(token_ids=[9], logprobs=[-1.5], text="\ufffd", finish_reason="length"),
    ]
    body = chat_completion(
        model="agent@3", outputs=outputs, prompt_tokens=11, logprobs=True, token_text=token_text
    )
    parsed = ChatCompletion.model_validate(body)
    assert parsed.object == "chat.completion"
    assert parsed.model == "agent@3"
    assert parsed.id.startswith("chatcmpl-")
    assert [c.index for c in parsed.choices] == [0, 1]
    first = parsed.choices[0]
    assert first.message.role == "assistant"
    assert first.message.content == "Hello wor:ld"
    assert first.finish_reason == "stop"
    assert first.logprobs is not None and first.logprobs.content is not None
    assert [t.token for t in first.logprobs.content] == ["token_id:5", "token_id:7", "token_id:2"]
    assert [len(t.top_logprobs) for t in first.logprobs.content] == [2, 2, 2]
    assert first.logprobs.content[0].top_logprobs[1].token == "token_id:9"
    assert parsed.choices[1].finish_reason == "length"
    assert parsed.usage is not None
    assert (parsed.usage.prompt_tokens, parsed.usage.completion_tokens) == (11, 4)
    assert parsed.usage.total_tokens == 15


def test_chat_completion_without_logprobs_has_null_logprobs() -> None:
    body = chat_completion(
        model="m@0",
        outputs=[
            SequenceOutput(token_ids=[5], logprobs=[-0.1], text="Hello", finish_reason="stop")
        ],
        prompt_tokens=1,
        logprobs=False,
        token_text=token_text,
    )
    assert body["choices"][0]["logprobs"] is None


def test_model_list_shape() -> None:
    body = model_list(["agent@2"], created=123)
    assert body == {
        "object": "list",
        "data": [{"id": "agent@2", "object": "model", "created": 123, "owned_by": "artfleet"}],
    }


def test_return_token_ids_is_read() -> None:
    assert not parse().return_token_ids
    assert parse(return_token_ids=True).return_token_ids
    with pytest.raises(RequestError) as caught:
        parse(return_token_ids=1)
    assert caught.value.param == "return_token_ids"


def test_chat_completion_with_token_ids_as_vllm_returns_them() -> None:
    outputs = [
        SequenceOutput(token_ids=[5, 7, 2], logprobs=[-0.1, -0.2, -0.3], finish_reason="stop"),
        SequenceOutput(token_ids=[9], logprobs=[-1.5], finish_reason="length"),
    ]
    body = chat_completion(
        model="agent@3",
        outputs=outputs,
        prompt_tokens=4,
        logprobs=True,
        token_text=token_text,
        prompt_token_ids=[1, 4, 6, 8],
    )
    assert body["prompt_token_ids"] == [1, 4, 6, 8]
    parsed = ChatCompletion.model_validate(body)
    assert [c.model_extra for c in parsed.choices] == [{"token_ids": [5, 7, 2]}, {"token_ids": [9]}]
    for choice in parsed.choices:
        assert choice.logprobs is not None and choice.logprobs.content is not None
        ids = [int(t.token.removeprefix("token_id:")) for t in choice.logprobs.content]
        assert ids == choice.model_extra["token_ids"]  # type: ignore[index]
    without = chat_completion(
        model="m", outputs=outputs, prompt_tokens=4, logprobs=True, token_text=token_text
    )
    assert "prompt_token_ids" not in without
    assert all("token_ids" not in c for c in without["choices"])
