"""OpenAI function calling on the built-in server: `tools`/`tool_choice` validation, the
Hermes tool-call format (template and parser, as vLLM's `hermes` parser), and constrained
`required`/named choices on a tiny random Llama with a character-level tokenizer, so the
grammar, not the model, is what makes the calls valid.
"""

from __future__ import annotations

import json
import string
from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import jsonschema
import pytest
import pytest_asyncio
from openai.types.chat.chat_completion import Choice
from tiny_server import serve_tiny
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from artfleet.contracts.chat_template import CHATML_TEMPLATE, TOOLS_CHATML_TEMPLATE
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend.tool_history import without_rendered_tool_calls
from artfleet_trainer.torch_serving.protocol import RequestError, parse_chat_request
from artfleet_trainer.torch_serving.tool_calls import parse_tool_calls

KEY = "tools-test-key"
EOS = 2
MODEL_VOCAB = 128  # wider than the tokenizer's 100: xgrammar must never allow the extra ids
CONTEXT = 2048
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
ADD = {
    "type": "object",
    "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["a"],
    "additionalProperties": False,
}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {"name": "weather", "description": "W", "parameters": WEATHER},
    },
    {"type": "function", "function": {"name": "add", "parameters": ADD}},
]
SCHEMAS = {"weather": WEATHER, "add": ADD}
MESSAGES = [{"role": "user", "content": "Weather in Oslo for 3 days?"}]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable character, plus ChatML's markers: any text is spellable."""
    special = ["<pad>", "<|im_start|>", "<|im_end|>"]
    chars = [c for c in string.printable if c not in "\r\x0b\x0c"]
    backend = Tokenizer(models.BPE({t: i for i, t in enumerate(special + chars)}, []))
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<pad>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = TOOLS_CHATML_TEMPLATE
    return tok


@pytest_asyncio.fixture
async def url(tokenizer: PreTrainedTokenizerFast) -> AsyncIterator[str]:
    async with serve_tiny(
        tokenizer, vocab=MODEL_VOCAB, eos=EOS, key=KEY, context=CONTEXT, step=0
    ) as port:
        yield f"http://127.0.0.1:{port}/v1/chat/completions"


async def _post(url: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    body = {"model": "agent", "messages": MESSAGES, "tools": TOOLS, "max_tokens": 300, **extra}
    headers = {"Authorization": f"Bearer {KEY}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as r,
    ):
        return r.status, await r.json()


def _valid_calls(choice: dict[str, Any], names: set[str]) -> list[dict[str, Any]]:
    """The choice's calls, each checked against its function's schema."""
    calls = choice["message"]["tool_calls"]
    assert calls and choice["finish_reason"] == "tool_calls"
    for call in calls:
        assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
        assert call["function"]["name"] in names
        arguments = json.loads(call["function"]["arguments"])
        jsonschema.validate(arguments, SCHEMAS[call["function"]["name"]])
    return calls


async def test_required_yields_schema_valid_calls_with_the_raw_tokens(
    url: str, tokenizer: PreTrainedTokenizerFast
) -> None:
    status, body = await _post(
        url,
        tool_choice="required",
        n=6,
        seed=7,
        logprobs=True,
        return_token_ids=True,
    )
    assert status == 200, body
    for choice in body["choices"]:
        assert len(_valid_calls(choice, {"weather", "add"})) == 1
        ids = choice["token_ids"]
        assert ids[-1] == EOS  # the turn ends as any other: end-of-turn sampled
        assert [int(e["token"].split(":")[1]) for e in choice["logprobs"]["content"]] == ids
        # The calls were read from exactly these tokens.
        text = str(tokenizer.decode(ids, skip_special_tokens=True))
        assert text.startswith("<tool_call>\n{") and text.endswith("}\n</tool_call>")
        assert (
            parse_tool_calls(text)[1][0]["function"]
            == choice["message"]["tool_calls"][0]["function"]
        )
        assert choice["message"]["content"] is None


async def test_parallel_required_calls_are_each_valid(url: str) -> None:
    status, body = await _post(
        url, tool_choice="required", n=4, seed=3, max_tokens=1200, parallel_tool_calls=True
    )
    assert status == 200, body
    for choice in body["choices"]:
        _valid_calls(choice, {"weather", "add"})


async def test_a_named_choice_calls_that_function(url: str) -> None:
    choice_param = {"type": "function", "function": {"name": "add"}}
    status, body = await _post(url, tool_choice=choice_param, n=4, seed=1)
    assert status == 200, body
    for choice in body["choices"]:
        assert [c["function"]["name"] for c in _valid_calls(choice, {"add"})] == ["add"]


async def test_none_and_auto_leave_free_text_unparsed_unless_it_calls(url: str) -> None:
    for mode in ("none", "auto"):
        status, body = await _post(url, tool_choice=mode, max_tokens=20, seed=0)
        assert status == 200, body
        (choice,) = body["choices"]
        assert "tool_calls" not in choice["message"]  # a random model writes no <tool_call>
        assert choice["finish_reason"] in ("stop", "length")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": {"a": 1}}, "tools"),
        ({"tools": [{"type": "function"}]}, "tools[0].function"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
        ({"tools": [*TOOLS, TOOLS[1]]}, "tools[2].function.name"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
            "tools[0].function.parameters",
        ),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tools": None, "tool_choice": "required"}, "tool_choice"),
        ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
    ],
)
async def test_bad_tools_or_tool_choice_are_400_naming_the_param(
    url: str, extra: dict[str, Any], param: str
) -> None:
    status, body = await _post(url, **extra)
    assert status == 400, body
    assert body["error"]["param"] == param and body["error"]["message"]


async def test_an_uncompilable_parameters_schema_is_400_naming_the_tool(url: str) -> None:
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}
    status, body = await _post(url, tools=[TOOLS[0], bad], tool_choice="required")
    assert status == 400, body
    assert body["error"]["param"] == "tools[1].function.parameters"


def test_tool_choice_defaults_to_auto_with_tools_and_none_without() -> None:
    def mode(**extra: Any) -> str:
        body = {"model": "m", "messages": MESSAGES, **extra}
        return parse_chat_request(body, default_max_tokens=8).tool_choice.mode

    assert mode() == "none"
    assert mode(tools=TOOLS) == "auto"
    assert mode(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}}) == (
        "named"
    )
    with pytest.raises(RequestError):
        mode(tool_choice="auto")


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ("just words", "just words", []),
        (
            'Let me check.\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>',
            "Let me check.\n",
            [("add", {"a": 1})],
        ),
        (
            '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>\n'
            '<tool_call>\n{"name": "weather", "arguments": {"city": "Lima", "days": 2}}\n'
            "</tool_call>",
            None,
            [("add", {"a": 1}), ("weather", {"city": "Lima", "days": 2})],
        ),
        # The last call cut off after its JSON (no closing tag): still a call, as in vLLM.
        ('<tool_call>\n{"name": "add", "arguments": {"a": 5}}', None, [("add", {"a": 5})]),
        # Not JSON, or no name: the whole text is content and there are no calls.
        ("<tool_call>\n{not json}\n</tool_call>", "<tool_call>\n{not json}\n</tool_call>", []),
        (
            '<tool_call>{"arguments": {}}</tool_call>',
            '<tool_call>{"arguments": {}}</tool_call>',
            [],
        ),
    ],
)
def test_hermes_parsing_as_vllm(text: str, content: str | None, calls: list[Any]) -> None:
    got_content, got_calls = parse_tool_calls(text)
    assert got_content == content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got_calls] == (
        calls
    )


def test_the_tool_template_renders_plain_chats_as_smollm2s_own(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    chats = [
        [{"role": "user", "content": "hi"}],
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"},
            {"role": "user", "content": "more"},
        ],
    ]
    for chat in chats:
        for generation_prompt in (True, False):
            rendered = [
                tokenizer.apply_chat_template(
                    chat,
                    chat_template=template,
                    tokenize=False,
                    add_generation_prompt=generation_prompt,
                )
                for template in (CHATML_TEMPLATE, TOOLS_CHATML_TEMPLATE)
            ]
            assert rendered[0] == rendered[1]


def test_the_tool_template_renders_tools_calls_and_results_in_hermes_format(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    call_text = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
    _, (call,) = parse_tool_calls(call_text)
    chat: list[dict[str, Any]] = [
        {"role": "user", "content": "add one"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "1"},
    ]
    text = str(
        tokenizer.apply_chat_template(cast(Any, chat), tools=cast(Any, TOOLS), tokenize=False)
    )
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert "<tools>\n" + json.dumps(TOOLS[0]) + "\n" + json.dumps(TOOLS[1]) + "\n</tools>" in text
    # The assistant's call renders as the model writes it: what it is trained on.
    assert "<|im_start|>assistant\n" + call_text + "<|im_end|>\n" in text
    assert "<|im_start|>user\n<tool_response>\n1\n</tool_response><|im_end|>\n" in text


def _sampled_choice(tokenizer: PreTrainedTokenizerFast, text: str) -> Choice:
    ids = [*tokenizer.encode(text), EOS]
    content, calls = parse_tool_calls(text)
    entries = [
        {"token": f"token_id:{i}", "logprob": -0.5, "bytes": [], "top_logprobs": []} for i in ids
    ]
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": content, "tool_calls": calls},
            "logprobs": {"content": entries},
        }
    )


def test_art_trains_each_sampled_call_once_in_a_multi_turn_episode(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    # ART 0.5.18 alone renders a non-final turn's calls again after its sampled tokens.
    first = '<tool_call>\n{"name": "add", "arguments": {"a": 11}}\n</tool_call>'
    second = '<tool_call>\n{"name": "add", "arguments": {"a": 22}}\n</tool_call>'
    trajectories = []
    for reward in (0.0, 1.0):
        one, two = _sampled_choice(tokenizer, first), _sampled_choice(tokenizer, second)
        tool_call_id = (one.message.tool_calls or [])[0].id
        messages: list[Any] = [
            {"role": "user", "content": "add twice"},
            one,
            {"role": "tool", "tool_call_id": tool_call_id, "content": "11"},
            two,
        ]
        trajectories.append(
            art.Trajectory(messages_and_choices=messages, tools=cast(Any, TOOLS), reward=reward)
        )
    groups = without_rendered_tool_calls([art.TrajectoryGroup(trajectories)])
    tokenize = art.preprocessing.tokenize.tokenize_trajectory_groups
    results = list(tokenize(tokenizer, groups, False, True))
    assert len(results) == 2
    for result in results:
        text = str(tokenizer.decode(result.token_ids))
        assert text.count('"a": 11') == 1 and text.count('"a": 22') == 1
        sampled = len(tokenizer.encode(first)) + len(tokenizer.encode(second)) + 2
        assert sum(result.assistant_mask) == sampled
