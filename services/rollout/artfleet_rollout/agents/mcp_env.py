"""One MCP session per episode (official `mcp` SDK): open, set up, offer tools, evaluate.

Server configs take HUD's forms, one server per config: `{name: {command, args, env,
cwd}}` spoken to over stdio (`local`, `ssh ... docker run ...`), `{name: {url, headers}}`
over streamable HTTP, and container servers (`{docker: {image, args}}`, or a `docker run`
command) started inside the sandbox service, the only service with the Docker socket. That
last transport is one pluggable function (`set_docker_transport`); by default it is
`artfleet.clients.mcp_stdio.sandbox_stdio_client`.

Every request has a deadline: a server that does not start, hangs or dies raises
`McpFailure` with what went wrong, and the episode fails (a counted rollout failure).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from mcp import ClientSession, stdio_client

from artfleet.clients.mcp_guard import NonProtocolOutput, guard_stdout
from artfleet.clients.mcp_local import ServerStderr, server_params
from artfleet.clients.mcp_stdio import McpStdioError, sandbox_stdio_client
from artfleet.specs.hud_config import check_mcp_config
from artfleet_rollout import metrics
from artfleet_rollout.environments import McpTask
from artfleet_rollout.ports import ToolResult

from .toolcalls import parse_arguments

log = logging.getLogger(__name__)
T = TypeVar("T")
Streams = tuple[Any, Any]
# (sandbox target, fleet token, image, args) -> the container's stdio as MCP streams.
DockerTransport = Callable[[str, str, str, list[str]], AbstractAsyncContextManager[Streams]]

_DOCKER_FLAGS = frozenset({"-i", "-t", "-it", "--rm", "--init", "--interactive", "--tty"})


class McpFailure(RuntimeError):
    """The MCP server failed the episode (did not start, hung, died, broke evaluate).
    `op` is the MCP request that failed, "" when it was not one."""

    def __init__(self, message: str, op: str = "") -> None:
        super().__init__(message)
        self.op = op


@dataclass(frozen=True)
class McpEndpoint:
    """Where container servers start: the sandbox service, and the fleet token for it."""

    sandbox_target: str
    token: str
    timeout_s: float  # per MCP request (start included)


def with_job_server(task: McpTask, mcp_config: str) -> McpTask:
    """The scenario's task with the job's server (its `mcp_config`, JSON) in place of the
    scenario's own; the task itself when the job names none."""
    if not mcp_config:
        return task
    try:
        config = check_mcp_config(json.loads(mcp_config))
    except ValueError as exc:  # JSONDecodeError included
        raise McpFailure(f"the job's mcp_config: {exc}") from None
    return replace(task, config=config)


def _default_docker(target: str, token: str, image: str, args: list[str]) -> Any:
    return sandbox_stdio_client(target, token, image, args)


_docker_transport: DockerTransport = _default_docker


def set_docker_transport(transport: DockerTransport) -> None:
    """Replaces how container servers are reached (the sandbox stream by default)."""
    global _docker_transport
    _docker_transport = transport


def docker_run(command: str, args: list[str]) -> tuple[str, list[str]] | None:
    """(image, container args) of a plain `docker run [-i --rm ...] IMAGE ARGS...` command;
    None for any other command. Other docker flags are refused: the sandbox decides them."""
    if command.rsplit("/", 1)[-1] != "docker" or not args or args[0] != "run":
        return None
    rest = args[1:]
    while rest and rest[0].startswith("-"):
        if rest[0] not in _DOCKER_FLAGS:
            raise McpFailure(f"docker flag {rest[0]!r} is not supported for MCP servers")
        rest = rest[1:]
    if not rest:
        raise McpFailure("`docker run` names no image")
    return rest[0], rest[1:]


def transport(
    config: Mapping[str, Any], endpoint: McpEndpoint, stderr: ServerStderr | None = None
) -> Any:
    """The streams context for a one-server `mcp_config`; a local server's stderr goes to
    `stderr` when given (else to this process's)."""
    if len(config) != 1:
        raise McpFailure(f"mcp_config must hold exactly one server, not {len(config)}")
    ((name, server),) = config.items()
    if not isinstance(server, Mapping):
        raise McpFailure(f"mcp_config.{name} must be a mapping")
    # Over stdio (not HTTP), a server's non-protocol output past a budget stops it.
    if name == "docker" or "image" in server:
        image, args = str(server.get("image", "")), [str(a) for a in server.get("args", [])]
        return guard_stdout(_docker_transport(endpoint.sandbox_target, endpoint.token, image, args))
    if "url" in server:
        return _http(str(server["url"]), dict(server.get("headers") or {}))
    command, args = str(server.get("command", "")), [str(a) for a in server.get("args", [])]
    if not command:
        raise McpFailure(f"mcp_config.{name} needs a command or a url")
    container = docker_run(command, args)
    if container is not None:
        return guard_stdout(_docker_transport(endpoint.sandbox_target, endpoint.token, *container))
    params = server_params(command, args, server.get("env"), server.get("cwd"))
    if stderr is None:
        return guard_stdout(stdio_client(params))
    return guard_stdout(stdio_client(params, errlog=stderr.file))


@asynccontextmanager
async def _http(url: str, headers: dict[str, str]) -> AsyncIterator[Streams]:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with (
        create_mcp_http_client(headers=headers) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams[0], streams[1]


def _text(result: Any) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content).strip()


def _cause(exc: BaseException) -> BaseException:
    # anyio (inside the SDK's transports) wraps failures in exception groups.
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def reward_of(value: Any) -> tuple[float, bool | None]:
    """(reward, done) from evaluate's answer: a number, `{"reward": x, "done": ...}`, or text
    holding either (the reward service's mcp_evaluate reads the same forms)."""
    if isinstance(value, str):
        try:
            return reward_of(json.loads(value.strip()))
        except json.JSONDecodeError:
            raise ValueError(f"evaluate returned text that is no reward: {value[:200]!r}") from None
    if isinstance(value, dict):
        if "reward" in value:
            done = value.get("done")
            return reward_of(value["reward"])[0], done if isinstance(done, bool) else None
        if set(value) == {"result"}:
            return reward_of(value["result"])
        raise ValueError(f"evaluate returned an object without 'reward': {sorted(value)}")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"reward is not a finite number: {value!r}")
    return float(value), None


@dataclass(frozen=True)
class Evaluation:
    reward: float
    done: bool | None
    text: str


class McpEnvironment:
    """An open session with an episode's server; also the agent's Toolbox."""

    def __init__(self, session: ClientSession, task: McpTask, timeout_s: float) -> None:
        self._session = session
        self._task = task
        self._timeout_s = timeout_s
        self._tools: list[dict[str, Any]] = []
        self.names: set[str] = set()

    async def _request(self, op: str, call: Awaitable[T]) -> T:
        start = time.perf_counter()
        try:
            return await asyncio.wait_for(call, self._timeout_s)
        except TimeoutError:
            message = f"MCP server: no answer to {op} in {self._timeout_s:g}s"
            raise McpFailure(message, op) from None
        except McpFailure:
            raise
        except Exception as exc:
            cause = _cause(exc)
            message = f"MCP server failed {op}: {type(cause).__name__}: {cause}"
            raise McpFailure(message, op) from exc
        finally:
            metrics.MCP_SECONDS.labels(op).observe(time.perf_counter() - start)

    async def start(self) -> str:
        """Initializes, lists the tools, runs setup; returns setup's text."""
        await self.connect()
        return await self._setup()

    async def connect(self) -> None:
        """Initializes and lists the tools; the server must have the evaluate tool."""
        await self._request("initialize", self._session.initialize())
        listed = await self._request("list_tools", self._session.list_tools())
        self.names = {tool.name for tool in listed.tools}
        if self._task.evaluate.name not in self.names:
            tools = ", ".join(sorted(self.names)) or "none"
            raise McpFailure(
                f"the MCP server has no evaluate tool {self._task.evaluate.name!r}"
                f" (its tools: {tools})"
            )
        hidden = {self._task.evaluate.name, self._task.setup.name if self._task.setup else ""}
        self._tools = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description or "",
                    "parameters": tool.input_schema,
                },
            }
            for tool in listed.tools
            if tool.name not in hidden
        ]

    async def _setup(self) -> str:
        if self._task.setup is None:
            return ""
        setup = self._task.setup
        result = await self._request(
            "setup", self._session.call_tool(setup.name, dict(setup.arguments))
        )
        if result.is_error:
            raise McpFailure(f"setup tool {setup.name!r} failed: {_text(result)[:300]}")
        return _text(result)

    def tools(self) -> list[dict[str, Any]]:
        return list(self._tools)

    async def call(self, name: str, arguments: str) -> ToolResult:
        try:
            args = parse_arguments(arguments)
        except ValueError as exc:
            return ToolResult(f"Error: {exc}", ok=False)
        result = await self._request("call_tool", self._session.call_tool(name, args))
        # The environment refused the call (a bad direction, a schema error): the model's
        # mistake, shown to it and counted as an invalid step.
        return ToolResult(_text(result) or "(no output)", ok=not result.is_error)

    async def evaluate(self) -> Evaluation:
        call = self._task.evaluate
        result = await self._request(
            "evaluate", self._session.call_tool(call.name, dict(call.arguments))
        )
        text = _text(result)
        if result.is_error:
            raise McpFailure(f"evaluate tool {call.name!r} failed: {text[:300]}")
        structured = result.structured_content
        try:
            reward, done = reward_of(structured if structured is not None else text)
        except ValueError as exc:
            raise McpFailure(str(exc)) from None
        return Evaluation(reward, done, text)

    async def close(self) -> None:
        """The session closes with `open_environment`'s context."""


@asynccontextmanager
async def open_environment(task: McpTask, endpoint: McpEndpoint) -> AsyncIterator[McpEnvironment]:
    """A session with the task's server (`start()` initializes it and runs setup). A failure
    names the server and carries its own account (its stderr's tail, or the sandbox's
    status), which is all the user sees of a server that did not start."""
    name = next(iter(task.config), "?")
    with ServerStderr() as stderr:
        stack = AsyncExitStack()
        try:
            streams = await stack.enter_async_context(transport(task.config, endpoint, stderr))
            session = await stack.enter_async_context(ClientSession(*streams))
        except McpFailure:
            await _close(stack)
            raise
        except Exception as exc:
            await _close(stack)
            cause = _cause(exc)
            raise McpFailure(
                f"MCP server {name!r} did not start: {type(cause).__name__}: {cause}"
            ) from exc
        try:
            yield McpEnvironment(session, task, endpoint.timeout_s)
        except McpFailure as failure:
            # The transport's own error comes out as it closes (the process has ended).
            account = _account(await _close(stack)) or stderr.tail()
            if failure.op == "initialize":
                why = account or str(failure).removeprefix("MCP server failed initialize: ")
                raise McpFailure(f"MCP server {name!r} did not start: {why}", "initialize") from (
                    failure
                )
            if account:
                raise McpFailure(f"{failure} (the server: {account})", failure.op) from failure
            raise
        finally:
            await _close(stack)


def _account(error: BaseException | None) -> str:
    if isinstance(error, McpStdioError):
        return f"{error.code.name}: {error.details}"
    if isinstance(error, NonProtocolOutput):
        return str(error)
    return ""


async def _close(stack: AsyncExitStack) -> BaseException | None:
    """Closes the session; what the transport raised while closing (a dead server's end),
    or None. Closing twice is a no-op."""
    try:
        await stack.aclose()
    except Exception as exc:
        cause = _cause(exc)
        log.debug("closing the MCP session: %s", cause)
        return cause
    return None


async def probe_evaluate(task: McpTask, endpoint: McpEndpoint) -> None:
    """Starts the task's server and checks its evaluate tool (a job's submit-time check);
    raises McpFailure saying what is wrong."""
    async with open_environment(task, endpoint) as environment:
        await environment.connect()
