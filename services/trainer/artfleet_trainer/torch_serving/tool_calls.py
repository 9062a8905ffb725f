"""OpenAI function calling on the torch server: `tools`/`tool_choice` validation and
parsing the model's output into `tool_calls`, the way vLLM's Hermes tool parser does.

The wire format is Hermes's (Qwen2/2.5, NousResearch Hermes; vLLM's
`--tool-call-parser hermes`): the model writes each call as

    <tool_call>
    {"name": "<function name>", "arguments": {<arguments object>}}
    </tool_call>

and whatever precedes the first `<tool_call>` is the message content. The embedded
SmolLM2's own template defines no tool format, so its tokenizer gets a ChatML template
that renders tools and calls in this format (chat_template.py); training (ART, same
tokenizer) renders them the same way.

`tool_choice` `required` and a named function are enforced by a grammar over exactly
this format (grammar.py), so the parsed calls are always schema-valid; `auto` is free
text parsed afterwards; `none` is free text, never parsed.

Pure functions (no model) so the formats are unit-tested.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
# vLLM's Hermes parser: complete calls, or a last one cut off by max_tokens.
_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
# OpenAI's rule for function names.
_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_TOOLS = 128


class ToolsError(ValueError):
    """Bad `tools`/`tool_choice`; `param` names the field (the server answers 400)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def bad_request(message: str, param: str) -> ToolsError:
    return ToolsError(message, param)


@dataclass(frozen=True)
class ToolSpec:
    """One function the model may call: its name and its arguments' JSON schema."""

    name: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolChoice:
    """`mode` is "none", "auto", "required" or "named" (then `name` is the function).
    `parallel` is OpenAI's `parallel_tool_calls` (only an explicit true counts here):
    several constrained calls per turn, or one. Parsing always takes every call."""

    mode: str
    name: str | None = None
    parallel: bool = False

    @property
    def constrained(self) -> bool:
        return self.mode in ("required", "named")


def parse_tools(value: Any) -> tuple[list[dict[str, Any]] | None, list[ToolSpec]]:
    """Validate OpenAI `tools`; return them as the template gets them, and their specs."""
    if value is None:
        return None, []
    if not isinstance(value, list):
        raise bad_request("'tools' must be a list", "tools")
    if len(value) > MAX_TOOLS:
        raise bad_request(f"'tools' takes at most {MAX_TOOLS} functions", "tools")
    specs: list[ToolSpec] = []
    for i, tool in enumerate(value):
        spec = _tool(tool, f"tools[{i}]")
        if any(s.name == spec.name for s in specs):
            raise bad_request(f"duplicate function name {spec.name!r}", f"tools[{i}].function.name")
        specs.append(spec)
    return (value or None), specs


def _tool(tool: Any, param: str) -> ToolSpec:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise bad_request("each tool must be {'type': 'function', 'function': {...}}", param)
    function = tool.get("function")
    if not isinstance(function, dict):
        raise bad_request("'function' must be an object", f"{param}.function")
    name = function.get("name")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise bad_request(
            "a function name must be 1-64 letters, digits, '_' or '-'", f"{param}.function.name"
        )
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise bad_request("'description' must be a string", f"{param}.function.description")
    parameters = function.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise bad_request(
            "'parameters' must be a JSON schema object", f"{param}.function.parameters"
        )
    return ToolSpec(name, parameters)


def parse_tool_choice(body: dict[str, Any], specs: list[ToolSpec]) -> ToolChoice:
    """OpenAI `tool_choice` (default: auto with tools, none without) and
    `parallel_tool_calls`."""
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    # Constrained turns make one call unless several are asked for explicitly: OpenAI's
    # default is true, but a small model offered "another call?" after each one keeps
    # calling until max_tokens (SmolLM2-135M does: docs/benchmarks.md).
    parallel = parallel is True
    value = body.get("tool_choice")
    if value is None:
        return ToolChoice("auto" if specs else "none", parallel=parallel)
    if value in ("none", "auto", "required"):
        choice = ToolChoice(value, parallel=parallel)
    elif isinstance(value, dict):
        choice = ToolChoice("named", _named(value, specs), parallel=False)
    else:
        raise bad_request(
            "'tool_choice' must be 'none', 'auto', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}",
            "tool_choice",
        )
    if choice.mode != "none" and not specs:
        raise bad_request(f"'tool_choice' {choice.mode!r} needs 'tools'", "tool_choice")
    return choice


def _named(value: dict[str, Any], specs: list[ToolSpec]) -> str:
    function = value.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if value.get("type") != "function" or not isinstance(name, str):
        raise bad_request(
            "a named 'tool_choice' is {'type': 'function', 'function': {'name': ...}}",
            "tool_choice",
        )
    if not any(spec.name == name for spec in specs):
        raise bad_request(f"'tool_choice' names {name!r}, which is not in 'tools'", "tool_choice")
    return name


def call_schema(spec: ToolSpec) -> dict[str, Any]:
    """The JSON schema of one call's object inside <tool_call> tags (name first, as the
    template renders it)."""
    return {
        "type": "object",
        "properties": {"name": {"const": spec.name}, "arguments": spec.parameters},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) from a completion, as vLLM's Hermes parser returns them.

    No `<tool_call>`, or a call that is not a JSON object with a string `name`: no calls
    and the whole text as content (vLLM does the same: the caller sees what was said)."""
    if TOOL_CALL_START not in text:
        return text, []
    calls: list[dict[str, Any]] = []
    for complete, cut in _CALL_RE.findall(text):
        try:
            call = json.loads(complete or cut)
        except json.JSONDecodeError:
            return text, []
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return text, []
        arguments = call.get("arguments", call.get("parameters", {}))
        calls.append(
            {
                "id": f"chatcmpl-tool-{uuid.uuid4().hex}",
                "type": "function",
                "function": {
                    "name": call["name"],
                    "arguments": json.dumps(arguments, ensure_ascii=False),
                },
            }
        )
    content = text[: text.find(TOOL_CALL_START)]
    return (content if content.strip() else None), calls
