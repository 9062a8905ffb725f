"""`mcp_evaluate`: HUD-style rewards from an environment's own MCP `evaluate` tool.

For each trajectory the scorer starts the environment's MCP server (HUD's config
forms: a local command such as `docker run -i ...`, or `ssh user@host docker run ...`,
both spoken to over stdio with the official `mcp` SDK), calls `setup`, replays the
trajectory's tool calls that name the server's tools (so the environment reaches the
state the agent left it in), calls `evaluate`, and maps its answer to a reward:
a number, `{"reward": x}` (HUD's `{"done": ..., "reward": ...}` included) or text holding
either. One server per trajectory: environment state never leaks between trajectories.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client

from artfleet.clients.mcp_guard import NonProtocolOutput, guard_stdout
from artfleet.clients.mcp_local import ServerStderr, server_params
from artfleet.contracts import codec
from artfleet.specs.scorer_params import MCP_EVALUATE, McpEvaluateParams, ToolCall

from .base import (
    ERROR,
    INVALID_OUTPUT,
    TIMEOUT,
    UNAVAILABLE,
    GroupContext,
    Result,
    Scored,
    Scorer,
    ScorerError,
    builtin,
)


@dataclass(frozen=True)
class MCPOptions:
    server: StdioServerParameters | None  # None: in-session results only (no replay)
    setup: ToolCall | None
    evaluate: ToolCall
    answer_argument: str
    replay: bool
    timeout_s: float | None


def parse_options(params: McpEvaluateParams) -> MCPOptions:
    server = None
    if params.has_server:
        command = params.command
        server = server_params(command.command, command.args, command.env, command.cwd)
    return MCPOptions(
        server=server,
        setup=params.setup,
        evaluate=params.evaluate,
        answer_argument=params.answer_argument,
        replay=params.replay,
        timeout_s=params.timeout_s,
    )


# ---------------------------------------------------------------- results


def reward_of(value: Any) -> tuple[float, bool | None]:
    """(reward, done) from what an evaluate tool returned; raises ValueError otherwise."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return reward_of(json.loads(text))
        except json.JSONDecodeError:
            raise ValueError(f"evaluate returned text that is no reward: {text[:200]!r}") from None
    if isinstance(value, dict):
        if "reward" in value:
            done = value.get("done")
            return _finite(value["reward"]), done if isinstance(done, bool) else None
        if set(value) == {"result"}:  # the SDK wraps a plain return value this way
            return reward_of(value["result"])
        raise ValueError(f"evaluate returned an object without 'reward': {sorted(value)}")
    return _finite(value), None


def _finite(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"reward is not a finite number: {value!r}")
    return float(value)


def _text(result: Any) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content).strip()


def _tool_calls(trajectory: Any) -> list[tuple[str, dict[str, Any]]]:
    """The (name, arguments) of every tool call the agent made, in order."""
    calls = []
    for message in trajectory.messages():
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                arguments = None  # the agent wrote bad JSON: that move never happened
            if isinstance(arguments, dict):
                calls.append((str(function.get("name", "")), arguments))
    return calls


def _last_answer(trajectory: Any) -> str:
    for message in reversed(trajectory.messages()):
        if message.get("role") == "assistant" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


# ---------------------------------------------------------------- scorer


class MCPEvaluateScorer(Scorer):
    name = MCP_EVALUATE

    def __init__(self, options: MCPOptions) -> None:
        self.options = options

    async def score(self, ctx: GroupContext, indices: Sequence[int]) -> list[Result]:
        limit = asyncio.Semaphore(ctx.runtime.settings.mcp_concurrency)
        timeout = self.options.timeout_s or ctx.runtime.settings.mcp_timeout_s

        async def one(i: int) -> Result:
            episode = ctx.episodes[i] if i < len(ctx.episodes) else None
            if episode is not None and episode.evaluated:
                # The MCP agent called evaluate in its own session, where the state is.
                return _in_session(episode)
            if self.options.server is None:
                return ScorerError(
                    ERROR, "the episode carries no evaluate result and no server is configured"
                )
            async with limit:
                start = time.monotonic()
                stderr = ServerStderr()
                try:
                    return await asyncio.wait_for(self._evaluate(ctx, i, stderr), timeout)
                except TimeoutError:
                    return ScorerError(TIMEOUT, f"no answer from the MCP server in {timeout:g}s")
                except Exception as exc:  # a server that died, a refused command, ...
                    cause = _cause(exc)
                    if isinstance(cause, ScorerError):
                        return cause
                    if isinstance(cause, NonProtocolOutput):
                        return ScorerError(ERROR, str(cause)[:500])
                    # The server's own account (ssh's, docker's) says why; the SDK's
                    # "Connection closed" does not.
                    said = stderr.tail()
                    message = f"MCP server: {type(cause).__name__}: {cause}"
                    return ScorerError(
                        UNAVAILABLE, f"{message} ({said})"[:500] if said else message[:500]
                    )
                finally:
                    stderr.close()
                    ctx.runtime.metrics.mcp_seconds.observe(time.monotonic() - start)

        return list(await asyncio.gather(*(one(i) for i in indices)))

    async def _evaluate(self, ctx: GroupContext, i: int, stderr: ServerStderr) -> Result:
        trajectory = codec.trajectory_from_proto(ctx.trajectories[i])
        opts = self.options
        assert opts.server is not None  # score() checked
        async with AsyncExitStack() as stack:
            # A server whose stdout floods with non-protocol output is stopped (its budget).
            stdio = guard_stdout(stdio_client(opts.server, stderr.file))
            streams = await stack.enter_async_context(stdio)
            session = await stack.enter_async_context(ClientSession(*streams))
            await session.initialize()
            tools = {tool.name for tool in (await session.list_tools()).tools}
            if opts.evaluate.tool not in tools:
                raise ScorerError(ERROR, f"the MCP server has no tool {opts.evaluate.tool!r}")
            if opts.setup is not None:
                await self._call(session, opts.setup.tool, dict(opts.setup.arguments), "setup")
            replayed = 0
            if opts.replay:
                reserved = {opts.evaluate.tool, opts.setup.tool if opts.setup else ""}
                for name, arguments in _tool_calls(trajectory):
                    if name in tools and name not in reserved:
                        # An invalid move is part of the episode: its error is no failure.
                        await session.call_tool(name, arguments)
                        replayed += 1
            arguments = dict(opts.evaluate.arguments)
            if opts.answer_argument:
                arguments[opts.answer_argument] = _last_answer(trajectory)
            result = await self._call(session, opts.evaluate.tool, arguments, "evaluate")
        return self._map(result, replayed)

    async def _call(
        self, session: ClientSession, tool: str, args: dict[str, Any], what: str
    ) -> Any:
        result = await session.call_tool(tool, args)
        if getattr(result, "is_error", False):
            raise ScorerError(ERROR, f"{what} tool {tool!r} failed: {_text(result)[:300]}")
        return result

    def _map(self, result: Any, replayed: int) -> Scored:
        structured = getattr(result, "structured_content", None)
        try:
            reward, done = reward_of(structured if structured is not None else _text(result))
        except ValueError as exc:
            raise ScorerError(INVALID_OUTPUT, str(exc)) from None
        metrics = {"mcp_replayed_calls": float(replayed)}
        if done is not None:
            metrics["mcp_done"] = float(done)
        return Scored(reward, (f"mcp_evaluate: reward {reward:g}, done {done}",), metrics)


def _in_session(episode: Any) -> Result:
    metrics = {"mcp_in_session": 1.0}
    if episode.HasField("evaluate_done"):
        metrics["mcp_done"] = float(episode.evaluate_done)
    reward = episode.evaluate_reward
    if not math.isfinite(reward):
        return ScorerError(INVALID_OUTPUT, f"in-session evaluate reward is {reward!r}")
    return Scored(reward, (f"mcp_evaluate: in-session reward {reward:g}",), metrics)


def _cause(exc: BaseException) -> BaseException:
    # anyio (inside the SDK's transports) wraps failures in exception groups.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _configure(params: McpEvaluateParams, field: str) -> Scorer:
    return MCPEvaluateScorer(parse_options(params))


MCP_SCORERS = (
    builtin(
        MCP_EVALUATE,
        "HUD-style: the environment's MCP evaluate tool, after replaying the tool calls",
        _configure,
    ),
)
