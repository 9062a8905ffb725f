"""In-process implementations of the rollout's ports (policy, workspace, reward), for tests.

They are test implementations of our own interfaces: scripted answers, a workspace that
records what it was asked, a reward service that answers what the test tells it to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat.chat_completion import Choice

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, rollout_pb2
from artfleet_rollout.agents.terminal import ExecOutcome
from artfleet_rollout.ports import Connections, PolicyTurn, SuiteRun, Usage, WorkspaceLost
from artfleet_rollout.ports import WorkspaceSpec as Spec


def bash(command: str, thought: str = "next step") -> str:
    return f"THOUGHT: {thought}\n```bash\n{command}\n```"


SUBMIT = bash("submit", "done")


def sampled(text: str, turn: int) -> Choice:
    """A choice as vLLM returns it: token logprobs and (extra fields) token ids."""
    ids = [100 + turn, 200 + turn]
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": text},
            "logprobs": {
                "content": [
                    {"token": f"token_id:{t}", "logprob": -0.5, "bytes": None, "top_logprobs": []}
                    for t in ids
                ],
                "refusal": None,
            },
            "token_ids": ids,
            "prompt_token_ids": [1, 2, 3, turn],
        }
    )


class ScriptedPolicy:
    """Answers `script[k]` at an episode's k-th turn, counted from the messages it is sent
    (each turn adds an answer and an observation to the first call's prompt), so concurrent
    episodes each follow the script; repeats the last entry after that."""

    def __init__(
        self,
        script: Sequence[str],
        *,
        usage: Callable[[int], Usage | None] = lambda turn: Usage(50 * (turn + 1), 20),
        fail_on_turn: int | None = None,
    ) -> None:
        self.script = list(script)
        self.usage = usage
        self.fail_on_turn = fail_on_turn
        self.calls: list[list[Any]] = []
        self.tools: list[Any] = []
        self.tool_choices: list[Any] = []
        self.max_tokens: list[int | None] = []  # each call's own limit (None: the task's)
        self._prompt_len: int | None = None

    def for_episode(self, key: str, seed: int | None = None) -> ScriptedPolicy:
        return self  # one script for every episode (each follows it from its messages)

    async def complete(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        max_tokens: int | None = None,
    ) -> PolicyTurn:
        self.calls.append(list(messages))
        self.max_tokens.append(max_tokens)
        self.tools.append(tools)
        self.tool_choices.append(tool_choice)
        if self._prompt_len is None:
            self._prompt_len = len(messages)
        turn = (len(messages) - self._prompt_len) // 2
        if turn == self.fail_on_turn:
            raise RuntimeError("the policy endpoint broke")
        text = self.script[min(turn, len(self.script) - 1)]
        return PolicyTurn(sampled(text, turn), self.usage(turn))


@dataclass
class FakePolicies:
    policy_: ScriptedPolicy
    keys: list[str] = field(default_factory=list)
    tasks: list[rollout_pb2.GroupTask] = field(default_factory=list)

    def policy(self, task: rollout_pb2.GroupTask, api_key: str) -> ScriptedPolicy:
        self.keys.append(api_key)
        self.tasks.append(task)
        return self.policy_

    async def served(self, task: rollout_pb2.GroupTask, api_key: str) -> str | None:
        return None


class FakeWorkspace:
    def __init__(self, owner: FakeWorkspaces, spec: Spec) -> None:
        self.owner = owner
        self.spec = spec
        self.files: dict[str, bytes] = {k: v.encode() for k, v in spec.files.items()}
        self.commands: list[str] = []
        self.checks: list[str] = []
        self.closed = False

    async def exec(self, command: str, *, timeout_s: float) -> ExecOutcome:
        self.commands.append(command)
        if self.owner.losses > 0:
            self.owner.losses -= 1
            raise WorkspaceLost("UNAVAILABLE: the replica went away")
        exit_code = self.owner.exit_codes.get(command, 0)
        return ExecOutcome(exit_code, f"ran {command}\n".encode(), b"", False)

    async def write_files(self, files: Mapping[str, str | bytes]) -> None:
        for path, content in files.items():
            self.files[path] = content.encode() if isinstance(content, str) else content

    async def read_file(self, path: str, *, max_bytes: int = 0) -> bytes:
        return self.files[path][: max_bytes or None]

    async def run_tests(self, command: str = "", *, timeout_s: float) -> SuiteRun:
        return SuiteRun(1, 0, 0, 1, 0, False)

    async def check(self, command: str, *, timeout_s: float) -> bool:
        self.checks.append(command)
        return self.owner.check_passes

    async def close(self) -> None:
        self.closed = True


@dataclass
class FakeWorkspaces:
    check_passes: bool = True
    losses: int = 0  # the next `losses` exec calls find the workspace lost
    exit_codes: dict[str, int] = field(default_factory=dict)
    opened: list[FakeWorkspace] = field(default_factory=list)

    async def open(self, spec: Spec) -> FakeWorkspace:
        workspace = FakeWorkspace(self, spec)
        self.opened.append(workspace)
        return workspace


Answer = Callable[[reward_pb2.ScoreGroupRequest], reward_pb2.ScoreGroupResponse]


def reward_by_check(request: reward_pb2.ScoreGroupRequest) -> reward_pb2.ScoreGroupResponse:
    """1.0 for a passed check, with a `task_check` component and a `process` one."""
    response = reward_pb2.ScoreGroupResponse()
    for episode in request.episodes:
        value = 1.0 if episode.check_passed else 0.0
        response.scores.add(reward=value, components={"task_check": value, "process": 0.25})
    return response


@dataclass
class FakeReward:
    answer: Answer = reward_by_check
    requests: list[reward_pb2.ScoreGroupRequest] = field(default_factory=list)

    async def score(
        self, group: pb.TrajectoryGroup, episodes: Sequence[pb.Episode], spec: pb.RewardSpec
    ) -> reward_pb2.ScoreGroupResponse:
        request = reward_pb2.ScoreGroupRequest(group=group, episodes=episodes, spec=spec)
        self.requests.append(request)
        return self.answer(request)


@dataclass
class FakeFleet:
    """All three ports, handed out by `connect` as the runner's Connections."""

    policies: FakePolicies
    workspaces: FakeWorkspaces = field(default_factory=FakeWorkspaces)
    reward: FakeReward = field(default_factory=FakeReward)
    connects: int = 0
    closes: int = 0

    async def connect(self, settings: object) -> Connections:
        self.connects += 1
        return Connections(self.policies, self.workspaces, self.reward, self._close)

    async def _close(self) -> None:
        self.closes += 1


def group_task(**overrides: object) -> rollout_pb2.GroupTask:
    """A valid task for the bundled shell-tasks environment; tests override what they vary."""
    fields: dict[str, object] = dict(
        job_id="job-1",
        group_id="g-7",
        environment="shell-tasks",
        scenario_id="create-hello-file",
        rollouts=3,
        max_turns=3,
        model_base_url="http://policy/v1",
        policy="agent@2",
        max_tokens=64,
        max_context_tokens=2048,
        step=2,
    )
    fields.update(overrides)
    return rollout_pb2.GroupTask(**fields)  # type: ignore[arg-type]
