"""OpenAI chat-completions wire format: request validation and response building.

Pure functions (no I/O) so the exact schema is unit-tested without a model. Token
logprob entries name tokens as `token_id:<id>`, as vLLM does with
`return_tokens_as_token_ids`: ART maps each entry back to a token id, and decoded text
would silently become id 0 (or a wrong id for a piece containing a colon).

With `return_token_ids: true` (vLLM's extension) the response also carries the exact
token ids: `prompt_token_ids` (top level: the prompt the model saw, chat template
applied) and `token_ids` on each choice (the sampled ids, the same as in the choice's
`token_id:<id>` logprob entries, end-of-turn token included). ART after 0.5.18 trains on
these instead of re-tokenizing.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from artfleet.contracts.chat_messages import MessageError, check_messages
from artfleet.runtime.auth import openai_error

from .generation import SamplingParams, SequenceOutput
from .tool_calls import ToolChoice, ToolsError, ToolSpec, parse_tool_calls, parse_tool_choice
from .tool_calls import parse_tools as _parse_tools

NO_TOOLS = ToolChoice("none")
MAX_N = 64
MAX_TOP_LOGPROBS = 20
MAX_STOP_STRINGS = 16
# JSON has no -inf; vLLM clamps the same way.
MIN_LOGPROB = -9999.0


class RequestError(Exception):
    """A request the server refuses, with its HTTP status and OpenAI error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        return openai_error(self.message, self.type, code=self.code, param=self.param)


def bad_request(message: str, param: str | None = None) -> RequestError:
    return RequestError(400, message, code="invalid_value" if param else None, param=param)


@dataclass(frozen=True)
class ResponseFormat:
    """Structured output: `kind` is "json_schema" (with `schema`) or "json_object"."""

    kind: str
    schema: dict[str, Any] | None = None

    def key(self) -> str:
        return self.kind + ":" + json.dumps(self.schema, sort_keys=True)


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[Any] | None
    params: SamplingParams
    logprobs: bool
    response_format: ResponseFormat | None = None  # None = free text
    return_token_ids: bool = False  # vLLM's: prompt_token_ids and per-choice token_ids
    tool_specs: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = NO_TOOLS
    # vLLM's extension: more variables for the chat template (Qwen3's enable_thinking).
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


def parse_chat_request(body: Any, *, default_max_tokens: int) -> ChatRequest:
    """Validate a /v1/chat/completions body; raise RequestError(400) on anything wrong."""
    model = require_model(body)
    logprobs = optional_field(body, "logprobs", bool, False)
    top_logprobs = int_field(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS)
    if top_logprobs and not logprobs:
        raise bad_request("'top_logprobs' requires 'logprobs': true", "top_logprobs")
    try:
        tools, specs = _parse_tools(body.get("tools"))
        tool_choice = parse_tool_choice(body, specs)
    except ToolsError as exc:
        raise bad_request(str(exc), exc.param) from exc
    params = sampling_params(body, default_max_tokens, top_logprobs=top_logprobs)
    response_format = _structured_output(body)
    if response_format is not None and tool_choice.constrained:
        raise bad_request(
            "a structured output cannot be combined with a 'required' or named 'tool_choice'",
            "tool_choice",
        )
    return ChatRequest(
        model,
        _messages(body.get("messages")),
        tools,
        params,
        logprobs,
        response_format,
        optional_field(body, "return_token_ids", bool, False),
        tuple(specs),
        tool_choice,
        _template_kwargs(body.get("chat_template_kwargs")),
    )


def require_model(body: Any) -> str:
    """The body's `model`, checked with what every generation route refuses (no object,
    streaming)."""
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' must be a non-empty string", "model")
    if body.get("stream"):
        raise bad_request("streaming is not supported by this server", "stream")
    return model


def sampling_params(body: dict[str, Any], default_max_tokens: int, **more: Any) -> SamplingParams:
    """The sampling fields chat and text completions share; `more` sets the others."""
    return SamplingParams(
        n=int_field(body, "n", 1, 1, MAX_N),
        temperature=float_field(body, "temperature", 1.0, 0.0, 2.0),
        top_p=float_field(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        max_tokens=max_tokens_field(body, default_max_tokens),
        stop=stop_strings(body.get("stop")),
        seed=optional_field(body, "seed", int, None),
        **more,
    )


# apply_chat_template's own parameters: a template variable of the same name would collide.
_RENDER_PARAMS = frozenset(
    {
        "conversation", "messages", "tools", "documents", "chat_template", "tokenize",
        "add_generation_prompt", "continue_final_message", "padding", "truncation",
        "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)  # fmt: skip


def _template_kwargs(value: Any) -> dict[str, Any]:
    """`chat_template_kwargs`: an object of template variables, as vLLM takes it."""
    param = "chat_template_kwargs"
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"'{param}' must be an object", param)
    reserved = sorted(set(value) & _RENDER_PARAMS)
    if reserved:
        raise bad_request(f"'{param}' cannot set {', '.join(reserved)}", param)
    return dict(value)


def _structured_output(body: dict[str, Any]) -> ResponseFormat | None:
    """OpenAI's `response_format`, or vLLM's `structured_outputs: {"json": schema}`
    extension (one of the two): a client that needs a tighter schema than its library
    sends (bounded lengths for a small judge) passes it there."""
    fmt = parse_response_format(body.get("response_format"))
    extension = body.get("structured_outputs")
    if extension is None:
        return fmt
    param = "structured_outputs"
    if fmt is not None:
        raise bad_request("use either 'response_format' or 'structured_outputs', not both", param)
    schema = extension.get("json") if isinstance(extension, dict) else None
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise bad_request(f"'structured_outputs.json' is not JSON: {exc}", param) from exc
    if not isinstance(schema, dict) or set(extension) != {"json"}:
        raise bad_request("'structured_outputs' supports only {'json': <JSON schema>}", param)
    return ResponseFormat("json_schema", schema)


def parse_response_format(value: Any) -> ResponseFormat | None:
    """OpenAI's `response_format`: text (default), json_object, or json_schema."""
    param = "response_format"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request("'response_format' must be an object", param)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ResponseFormat("json_object")
    if kind != "json_schema":
        raise bad_request(
            "'response_format.type' must be 'text', 'json_object' or 'json_schema'",
            f"{param}.type",
        )
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise bad_request("'response_format.json_schema' must be an object", f"{param}.json_schema")
    schema = spec.get("schema")
    if not isinstance(schema, dict):
        raise bad_request(
            "'response_format.json_schema.schema' must be a JSON schema object",
            f"{param}.json_schema.schema",
        )
    return ResponseFormat("json_schema", schema)


def optional_field(body: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = body.get(key)
    if value is None:
        return default
    # bool is an int subclass: `"n": true` must not pass as 1.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise bad_request(f"'{key}' must be of type {kind.__name__}", key)
    return value


def int_field(body: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = int(optional_field(body, key, int, default))
    if not low <= value <= high:
        raise bad_request(f"'{key}' must be between {low} and {high}", key)
    return value


def float_field(
    body: dict[str, Any], key: str, default: float, low: float, high: float, low_open: bool = False
) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad_request(f"'{key}' must be a number", key)
    if value > high or value < low or (low_open and value == low):
        interval = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        raise bad_request(f"'{key}' must be in {interval}", key)
    return float(value)


def max_tokens_field(body: dict[str, Any], default: int) -> int:
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    return int_field(body, key, default, 1, 1 << 20)


def stop_strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise bad_request("'stop' must be a string or a list of strings", "stop")
    if len(value) > MAX_STOP_STRINGS:
        raise bad_request(f"'stop' takes at most {MAX_STOP_STRINGS} strings", "stop")
    return tuple(s for s in value if s)


def _messages(value: Any) -> list[dict[str, Any]]:
    try:
        return check_messages(value)
    except MessageError as exc:
        raise bad_request(exc.message, exc.param) from None


def model_not_found(requested: str, why: str = "") -> RequestError:
    return RequestError(
        404,
        f"The model `{requested}` does not exist or is not served at that step"
        + (f": {why}." if why else "."),
        code="model_not_found",
        param="model",
    )


TokenText = Callable[[int], str]


def clamp_logprob(logprob: float) -> float:
    return max(float(logprob), MIN_LOGPROB) if not math.isnan(logprob) else MIN_LOGPROB


def token_entry(token_id: int, logprob: float, token_text: TokenText) -> dict[str, Any]:
    return {
        "token": f"token_id:{token_id}",
        "logprob": clamp_logprob(logprob),
        # The bytes of the decoded text (always valid UTF-8: ART decodes the first one).
        "bytes": list(token_text(token_id).encode("utf-8")),
    }


def choice_logprobs(out: SequenceOutput, token_text: TokenText) -> dict[str, Any]:
    content = []
    for i, (token_id, logprob) in enumerate(zip(out.token_ids, out.logprobs, strict=True)):
        top = out.top_logprobs[i] if i < len(out.top_logprobs) else []
        entry = token_entry(token_id, logprob, token_text)
        entry["top_logprobs"] = [token_entry(t, lp, token_text) for t, lp in top]
        content.append(entry)
    return {"content": content, "refusal": None}


def chat_completion(
    *,
    model: str,
    outputs: Sequence[SequenceOutput],
    prompt_tokens: int,
    logprobs: bool,
    token_text: TokenText,
    created: int | None = None,
    prompt_token_ids: Sequence[int] | None = None,
    parse_tools: bool = False,
) -> dict[str, Any]:
    """The response body of a chat completion, in OpenAI's schema.

    `prompt_token_ids` (the request asked `return_token_ids`): the prompt's ids go in the
    body and each choice gets its sampled `token_ids`, as vLLM returns them.
    `parse_tools` (tool_choice other than none): tool calls in the text become the
    message's `tool_calls` and finish_reason "tool_calls"; tokens and logprobs stay the
    raw ones, the calls are read from the same text."""
    choices: list[dict[str, Any]] = []
    for i, out in enumerate(outputs):
        choice: dict[str, Any] = {
            "index": i,
            "message": _message_of(out.text, parse_tools),
            "finish_reason": out.finish_reason or "length",
            "logprobs": choice_logprobs(out, token_text) if logprobs else None,
        }
        if choice["message"].get("tool_calls") and out.finish_reason == "stop":
            choice["finish_reason"] = "tool_calls"
        if prompt_token_ids is not None:
            choice["token_ids"] = [int(t) for t in out.token_ids]
        choices.append(choice)
    completion_tokens = sum(len(out.token_ids) for out in outputs)
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    if prompt_token_ids is not None:
        body["prompt_token_ids"] = [int(t) for t in prompt_token_ids]
    return body


def _message_of(text: str, parse_tools: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if parse_tools:
        content, calls = parse_tool_calls(text)
        if calls:
            message["content"] = content
            message["tool_calls"] = calls
    return message


def model_list(names: Sequence[str], created: int) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": created, "owned_by": "artfleet"}
            for name in names
        ],
    }
