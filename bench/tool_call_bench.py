"""Tool calling with the embedded SmolLM2-135M through the torch server: how many turns
yield schema-valid calls.

    python bench/tool_call_bench.py [--turns 100] [--max-tokens 128] [--temperature 1.0]

The real server (TorchBackend, as the fleet registers a model) gets OpenAI requests with
four tools (a 2048 board's `move`, `bash`, a file `view`, `submit`) and a short task per
scenario; each scenario is sampled `n` times, all requests at once (the server batches
them). A turn is valid when its finish_reason is "tool_calls" and every call names an
offered tool with arguments that are JSON matching that tool's schema (jsonschema).

The same tasks are sampled with `tool_choice: "auto"` first (30 turns by default: free
text runs to max_tokens, the slow part): the baseline, the model left to the format on
its own (its template shows it the Hermes format).

Last lines: `auto_tool_call_valid_frac=` (baseline), `tool_call_valid_frac=` (required;
target >= 0.95), `required_over_auto_valid_ratio=`, and `required_turn_seconds=`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from typing import Any

import jsonschema
from openai import AsyncOpenAI

from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend.backend import TorchBackend

KEY = "tool-call-bench"


def _tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


TOOLS = [
    _tool(
        "move",
        "Slide the 2048 board's tiles in one direction.",
        {"direction": {"type": "string", "enum": ["up", "down", "left", "right"]}},
    ),
    _tool("bash", "Run a shell command in the sandbox.", {"command": {"type": "string"}}),
    _tool(
        "view",
        "Show lines of a file.",
        {
            "path": {"type": "string"},
            "start": {"type": "integer", "minimum": 1},
            "end": {"type": "integer", "minimum": 1},
        },
    ),
    _tool("submit", "Finish the task.", {"answer": {"type": "string"}}),
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
TASKS = [
    "Board:\n2 0 0 2\n0 4 0 0\n0 0 0 0\n0 0 2 0\nMerge the two 2s in the top row.",
    "List the files in /work/app.",
    "Show lines 1 to 20 of /work/app/main.py.",
    "The answer is 42. Submit it.",
    "Count the lines of README.md.",
    "Board:\n4 4 0 0\n0 0 0 0\n0 2 0 0\n0 0 0 2\nMove so the 4s merge.",
    "Find every TODO in the src folder.",
    "Open tests/test_parse.py from line 10 to 30.",
    "Print the current directory.",
    "Submit the word done.",
]


def valid(choice: Any) -> bool:
    calls = choice.message.tool_calls
    if choice.finish_reason != "tool_calls" or not calls:
        return False
    for call in calls:
        schema = SCHEMAS.get(call.function.name)
        if schema is None:
            return False
        try:
            jsonschema.validate(json.loads(call.function.arguments), schema)
        except (json.JSONDecodeError, jsonschema.ValidationError):
            return False
    return True


async def sample(
    client: AsyncOpenAI, model: str, args: argparse.Namespace, choice: str
) -> list[bool]:
    turns = args.turns if choice == "required" else args.auto_turns
    per_task = -(-turns // len(TASKS))

    async def one(i: int, task: str) -> list[bool]:
        request: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": task}],
            "tools": TOOLS,
            "tool_choice": choice,
            "n": per_task,
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "seed": 1000 + i,
        }
        response = await client.chat.completions.create(**request)
        for c in response.choices:
            if args.show_invalid and choice == "required" and not valid(c):
                print("INVALID", c.finish_reason, repr(c.message.content), c.message.tool_calls)
        return [valid(c) for c in response.choices]

    results = await asyncio.gather(*(one(i, t) for i, t in enumerate(TASKS)))
    return [ok for batch in results for ok in batch][:turns]


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as path:
        backend = TorchBackend(path=path, api_key=KEY)
        model: art.TrainableModel[Any, Any] = art.TrainableModel(
            name="bench", project="bench", base_model="smollm2-135m-instruct"
        )
        await model.register(backend)
        assert model.inference_base_url is not None
        # A 2-core machine shared with others can take many minutes for a batch.
        client = AsyncOpenAI(
            base_url=model.inference_base_url, api_key=KEY, max_retries=0, timeout=3600
        )
        try:
            name = model.get_inference_name()
            auto = await sample(client, name, args, "auto")
            started = time.monotonic()
            required = await sample(client, name, args, "required")
            seconds = time.monotonic() - started
        finally:
            await client.close()
            await backend.close()
    auto_frac = sum(auto) / len(auto)
    required_frac = sum(required) / len(required)
    print(f"turns={len(required)}")
    print(f"auto_turns={len(auto)}")
    print(f"auto_tool_call_valid_frac={auto_frac:.3f}")
    print(f"tool_call_valid_frac={required_frac:.3f}")
    ratio = required_frac / auto_frac if auto_frac else float("inf")
    print(f"required_over_auto_valid_ratio={ratio:.2f}")
    print(f"required_turn_seconds={seconds / len(required):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=100, help="required turns sampled")
    parser.add_argument("--auto-turns", type=int, default=30, help="auto (baseline) turns")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--show-invalid", action="store_true", help="print invalid turns")
    asyncio.run(main(parser.parse_args()))
