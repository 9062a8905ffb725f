"""Scripted experts: demonstrations of an environment's episodes for the SFT phase.

    artfleet-demos calculator --split train --out demos.jsonl [--limit 64]

Writes one JSON line per episode in the OpenAI messages format the trainer's SFT phase
reads (`sft: {data_path: demos.jsonl}`): `{"task_id", "score", "messages", "tools"}`.
Each line is a real episode, not a made-up transcript: the environment's MCP server starts
as the agent starts it, the episode opens with the agent's own messages
(`tool_prompts.mcp_messages`, the same tools in the same order), the expert's calls run on the
server and its answers are the observations, and the server's evaluate tool gives `score`
(so `sft.min_score: 1` keeps solved episodes only). Only the train split is demonstrated
by default: SFT must not see the held-out tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from artfleet_rollout.agents import tool_prompts
from artfleet_rollout.agents.mcp_env import McpEndpoint, McpEnvironment, open_environment
from artfleet_rollout.agents.turns import canonical_tools
from artfleet_rollout.bundled import calculator
from artfleet_rollout.environments import Scenario, get_environment
from artfleet_rollout.environments import calculator as calculator_env

# (name, arguments) of each call, then the closing text; the expert reads no observation
# it cannot predict, and checks each one it can (a server that disagrees is a bug).
Plan = tuple[list[tuple[str, dict[str, Any], str | None]], str]


def calculator_plan(scenario: Scenario) -> Plan:
    if scenario.mcp is None or scenario.mcp.setup is None:
        raise ValueError(f"{scenario.id}: not a calculator task")
    problem = calculator.Problem(**scenario.mcp.setup.arguments)
    calls: list[tuple[str, dict[str, Any], str | None]] = [
        ("calculate", {"a": s.a, "op": s.op, "b": s.b}, str(calculator.apply(s.a, s.op, s.b)))
        for s in problem.steps()
    ]
    calls.append(("answer", {"value": problem.answer()}, None))
    return calls, f"The answer is {problem.answer()}."


EXPERTS: dict[str, Callable[[Scenario], Plan]] = {calculator_env.NAME: calculator_plan}


def _assistant_call(n: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


async def _play(environment: McpEnvironment, plan: Plan, messages: list[Any]) -> None:
    calls, closing = plan
    for n, (name, arguments, expected) in enumerate(calls, 1):
        messages.append(_assistant_call(n, name, arguments))
        result = await environment.call(name, json.dumps(arguments))
        if not result.ok or (expected is not None and result.text != expected):
            raise RuntimeError(f"{name}({arguments}) answered {result.text!r}, not {expected!r}")
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": result.text})
    messages.append({"role": "assistant", "content": closing})


async def demonstrate(scenario: Scenario, plan: Plan, timeout_s: float = 60.0) -> dict[str, Any]:
    """One demonstrated episode as an SFT record."""
    if scenario.mcp is None:
        raise ValueError(f"{scenario.id}: the expert plays MCP tasks only")
    # Local stdio servers only: no sandbox target or token is needed.
    async with open_environment(scenario.mcp, McpEndpoint("", "", timeout_s)) as environment:
        setup_text = await environment.start()
        tools = canonical_tools(environment.tools())
        messages = tool_prompts.mcp_messages(
            tools, scenario.system, setup_text, scenario.instruction
        )
        await _play(environment, plan, messages)
        evaluation = await environment.evaluate()
    score = evaluation.reward
    return {"task_id": scenario.id, "score": score, "messages": messages, "tools": tools}


async def demonstrations(
    environment: str, split: str, limit: int = 0, concurrency: int = 4
) -> list[dict[str, Any]]:
    """The expert's records for the split's tasks (the first `limit`; 0 = all), in order."""
    expert = EXPERTS.get(environment)
    if expert is None:
        known = ", ".join(sorted(EXPERTS))
        raise ValueError(f"no scripted expert for {environment!r}; experts: {known}")
    scenarios = get_environment(environment).scenarios(split)
    scenarios = scenarios[:limit] if limit else scenarios
    gate = asyncio.Semaphore(concurrency)

    async def one(scenario: Scenario) -> dict[str, Any]:
        async with gate:
            return await demonstrate(scenario, expert(scenario))

    return list(await asyncio.gather(*(one(s) for s in scenarios)))


def write_jsonl(records: list[dict[str, Any]], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="artfleet-demos", description=__doc__.split("\n")[0])
    parser.add_argument("environment", help=f"one of: {', '.join(sorted(EXPERTS))}")
    parser.add_argument("--out", type=Path, required=True, help="JSONL file to write")
    parser.add_argument("--split", default="train", choices=("train", "test"))
    parser.add_argument("--limit", type=int, default=0, help="first N tasks; 0 = all")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.environment not in EXPERTS:
        print(f"no scripted expert for {args.environment!r}; experts: {', '.join(EXPERTS)}")
        sys.exit(2)
    if args.limit < 0:
        print("--limit must be 0 or more")
        sys.exit(2)
    records = asyncio.run(demonstrations(args.environment, args.split, args.limit))
    write_jsonl(records, args.out)
    solved = sum(1 for r in records if r["score"] >= 1.0)
    print(f"{len(records)} demonstrations ({solved} solved) -> {args.out}")


if __name__ == "__main__":
    main()
