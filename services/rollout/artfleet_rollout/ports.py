"""The rollout's I/O edges as small protocols: the policy, the workspace, the reward service.

The episode loop and the group runner see only these; the OpenAI and gRPC adapters live
in `adapters.py`, and tests drive the loop with in-process implementations.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pydantic
from openai.types.chat.chat_completion import Choice

from artfleet.clients.episode import TestRun
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, rollout_pb2
from artfleet_rollout.agents.terminal import ExecResultLike

# ---------------------------------------------------------------- policy


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def context_tokens(self) -> int:
        """What the conversation occupies once this answer is appended."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class PolicyTurn:
    """One sampled assistant turn: an OpenAI `Choice` with token logprobs (and, where the
    server returns them, vLLM token ids in its extra fields), and the token usage."""

    choice: Choice
    usage: Usage | None = None
    # The checkpoint step of the policy that answered (from the served `name@step`);
    # None when the server did not say.
    policy_version: int | None = None


def encode(value: Any) -> bytes:
    """JSON as the OpenAI SDK posts it (compact, UTF-8, pydantic models dumped)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_dump).encode()


def _dump(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(exclude_unset=True, mode="json", by_alias=True)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class EncodedList(list[Any]):
    """A list of JSON values that carries each one's JSON text too (`encoded[i]` is item
    i, UTF-8, compact). An episode's history grows by one or two messages a turn: its
    messages are converted and encoded once, and a policy that posts JSON joins the texts
    instead of encoding the whole history again each turn. Anything else reads a list."""

    def __init__(self, items: Sequence[Any] = (), encoded: Sequence[bytes] = ()) -> None:
        super().__init__(items)
        self.encoded = list(encoded)
        if len(self.encoded) != len(self):
            raise ValueError("an EncodedList needs one JSON text per item")


class Policy(Protocol):
    """The model being trained, with the task's sampling settings bound. `tool_choice` is
    OpenAI's (`auto`, `none`, `required`, `{"type": "function", ...}`); None = not sent.
    `messages` and `tools` may be EncodedLists (their JSON made once, by the caller).
    `max_tokens` is a call's own completion limit, at most the task's (a plugin's
    `max_completion_tokens`); callers pass it only when they have one."""

    def for_episode(self, key: str, seed: int | None = None) -> Policy:
        """The same policy for one episode (`key`, unique in the fleet): its calls go to
        the inference replica that holds its prefix while that one serves, and with a
        `seed` (the rollout's: `artfleet.contracts.seeds`) each call carries its own
        seed (`seeds.call_seed` of it and the call's number)."""
        ...

    async def complete(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        max_tokens: int | None = None,
    ) -> PolicyTurn: ...


class ContextOverflow(ValueError):
    """The policy refused the call because the conversation no longer fits the model's
    context (vLLM's and the torch server's 400). Not a failure of the episode: it ends
    there with finish `context`, as an agent's own budget check ends it
    (`artfleet_rollout.episode`, `agents.kinds.art`)."""


class PolicyUnavailable(ConnectionError):
    """No inference replica answered (refused, timed out, or 502/503/504, in every round
    of retries): an outage of the fleet's inference, not a failure of the episode.
    The group is held and run again when the endpoint serves again (`policy_outage`)."""


class Policies(Protocol):
    def policy(self, task: rollout_pb2.GroupTask, api_key: str) -> Policy:
        """The task's policy endpoint (`model_base_url`, `policy`) called with `api_key`."""

    async def served(self, task: rollout_pb2.GroupTask, api_key: str) -> str | None:
        """None when the task's endpoint serves its policy now; else why not."""
        ...


# ---------------------------------------------------------------- workspace


class WorkspaceLost(ConnectionError):
    """The workspace is gone with the machine that held it: the episode may start again."""


@dataclass(frozen=True)
class WorkspaceSpec:
    """What a new workspace starts from."""

    job_id: str
    files: Mapping[str, str]
    image: str = ""
    network: bool = False
    # A repo in the sandbox's cache dir, unpacked into the workspace (repo tasks).
    repo_path: str = ""
    repo_commit: str = ""


# What a test run reported: one type for the agents and for plugin code's sandbox handle.
SuiteRun = TestRun


class Workspace(Protocol):
    """One episode's sandbox session. Methods raise WorkspaceLost when it is gone."""

    async def exec(self, command: str, *, timeout_s: float) -> ExecResultLike: ...

    async def write_files(self, files: Mapping[str, str | bytes]) -> None: ...

    async def read_file(self, path: str, *, max_bytes: int = 0) -> bytes: ...

    async def run_tests(self, command: str = "", *, timeout_s: float) -> SuiteRun: ...

    async def check(self, command: str, *, timeout_s: float) -> bool:
        """Runs the scenario's check: True when it exits 0 within the time limit."""
        ...

    async def close(self) -> None: ...


class Workspaces(Protocol):
    async def open(self, spec: WorkspaceSpec) -> Workspace: ...


# ---------------------------------------------------------------- tools


@dataclass(frozen=True)
class ToolResult:
    """What one tool call gave back to the model (always text: errors included).

    `ok` False = the call was malformed (unknown tool, bad arguments): it counts as an
    invalid format for process rewards. A tool that ran and failed (a command exiting 1)
    is `ok`. `done` ends the episode (`submit`). `exec` is the command outcome of a tool
    that ran a shell command (`command`), for the step's process facts.
    """

    text: str
    ok: bool = True
    done: bool = False
    command: str = ""
    exec: ExecResultLike | None = None


class Toolbox(Protocol):
    """The tools an episode offers the model, as OpenAI function schemas."""

    def tools(self) -> list[dict[str, Any]]: ...

    async def call(self, name: str, arguments: str) -> ToolResult:
        """Runs one call; `arguments` is the JSON text the model wrote. Never raises for
        the model's mistakes (they are results); raises when the toolbox itself is gone."""
        ...

    async def close(self) -> None: ...


# ---------------------------------------------------------------- reward


class RewardClient(Protocol):
    async def score(
        self, group: pb.TrajectoryGroup, episodes: Sequence[pb.Episode], spec: pb.RewardSpec
    ) -> reward_pb2.ScoreGroupResponse:
        """Scores `group` (sent without token logprobs or ids); `episodes` are parallel."""
        ...


# ---------------------------------------------------------------- all three


@dataclass(frozen=True)
class Connections:
    """What a group runner holds from start() to stop()."""

    policies: Policies
    workspaces: Workspaces
    reward: RewardClient
    close: Callable[[], Awaitable[None]]
