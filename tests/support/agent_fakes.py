"""In-process implementations of the rollout's ports for the agent-kind tests: a scripted
policy (its k-th answer at an episode's k-th turn), a workspace that refuses to open (MCP
and single-turn episodes must not open one), and a reward service that answers 0.5."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openai.types.chat.chat_completion import Choice

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, rollout_pb2
from artfleet_rollout.ports import Connections, PolicyTurn, Usage, WorkspaceSpec


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def sampled(text: str, turn: int, tool_calls: list[dict[str, Any]] | None = None) -> Choice:
    ids = [100 + turn, 200 + turn]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return Choice.model_validate(
        {
            "index": 0,
            "finish_reason": "tool_calls" if tool_calls else "stop",
            "message": message,
            "logprobs": {
                "content": [
                    {"token": f"token_id:{t}", "logprob": -0.5, "bytes": None, "top_logprobs": []}
                    for t in ids
                ],
                "refusal": None,
            },
            "token_ids": ids,
        }
    )


class Script:
    """Answers `answers[k]` at turn k (counted from the first call's prompt length; each
    turn adds the answer and one reply message); repeats the last answer after that."""

    def __init__(self, answers: Sequence[str]) -> None:
        self.answers = list(answers)
        self.tools: list[Any] = []
        self.tool_choices: list[Any] = []
        self._prompt_len: int | None = None

    def for_episode(self, key: str, seed: int | None = None) -> Script:
        return self  # one script for every episode (each follows it from its messages)

    async def complete(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        max_tokens: int | None = None,
    ) -> PolicyTurn:
        self.tools.append(tools)
        self.tool_choices.append(tool_choice)
        if self._prompt_len is None:
            self._prompt_len = len(messages)
        turn = (len(messages) - self._prompt_len) // 2
        text = self.answers[min(turn, len(self.answers) - 1)]
        return PolicyTurn(sampled(text, turn), Usage(100 + 50 * turn, 20))

    def policy(self, task: rollout_pb2.GroupTask, api_key: str) -> Script:
        return self

    async def served(self, task: rollout_pb2.GroupTask, api_key: str) -> str | None:
        return None


class NoWorkspaces:
    async def open(self, spec: WorkspaceSpec) -> Any:
        raise AssertionError("this agent kind must not open a sandbox session")


@dataclass
class HalfReward:
    requests: list[reward_pb2.ScoreGroupRequest] = field(default_factory=list)

    async def score(
        self, group: pb.TrajectoryGroup, episodes: Sequence[pb.Episode], spec: pb.RewardSpec
    ) -> reward_pb2.ScoreGroupResponse:
        request = reward_pb2.ScoreGroupRequest(group=group, episodes=episodes, spec=spec)
        self.requests.append(request)
        response = reward_pb2.ScoreGroupResponse()
        for _ in episodes:
            response.scores.add(reward=0.5)
        return response


def connections(
    script: Script, workspaces: Any = None, reward: HalfReward | None = None
) -> Callable[[object], Awaitable[Connections]]:
    async def close() -> None:
        return None

    async def connect(settings: object) -> Connections:
        return Connections(script, workspaces or NoWorkspaces(), reward or HalfReward(), close)

    return connect


def task(environment: str, scenario_id: str, **fields: Any) -> rollout_pb2.GroupTask:
    values: dict[str, Any] = dict(
        job_id="job-1",
        group_id="g-1",
        environment=environment,
        scenario_id=scenario_id,
        rollouts=2,
        max_turns=4,
        model_base_url="http://policy/v1",
        policy="agent@1",
        max_tokens=64,
        max_context_tokens=4096,
        step=1,
    )
    values.update(fields)
    return rollout_pb2.GroupTask(**values)
