"""The episode loop against in-process policy and workspace implementations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from openai.types.chat.chat_completion import Choice
from pydantic import SecretStr
from rollout_fakes import SUBMIT, FakeWorkspaces, ScriptedPolicy, bash, group_task

from artfleet.contracts.art_types import art
from artfleet.v1 import rollout_pb2
from artfleet_rollout.agents.terminal import FORMAT_HELP, build_initial_messages
from artfleet_rollout.environments import get_environment
from artfleet_rollout.episode import EpisodeContext, run_episode
from artfleet_rollout.ports import ContextOverflow, PolicyTurn, Usage
from artfleet_rollout.settings import RolloutSettings

SCENARIO = get_environment("shell-tasks").get("create-hello-file")
PROMPT = len(build_initial_messages(SCENARIO))  # system, demonstration, task
SETTINGS = RolloutSettings(api_token=SecretStr("unit-test-token"), observation_chars=200)


def _task(**overrides: object) -> rollout_pb2.GroupTask:
    fields: dict[str, object] = dict(
        group_id="g-1", scenario_id=SCENARIO.id, rollouts=1, max_turns=4, policy="agent@3", step=3
    )
    return group_task(**{**fields, **overrides})


def _observation(trajectory: art.Trajectory, turn: int) -> str:
    """The user message that answered the turn-th (0-based) assistant turn."""
    message = trajectory.messages_and_choices[PROMPT + 2 * turn + 1]
    assert isinstance(message, dict) and message["role"] == "user"
    content = message["content"]
    assert isinstance(content, str)
    return content


def _ctx(policy: ScriptedPolicy, workspaces: FakeWorkspaces, **task: object) -> EpisodeContext:
    return EpisodeContext(_task(**task), SCENARIO, policy, workspaces, SETTINGS)


async def test_submit_runs_commands_then_the_check_and_closes() -> None:
    policy = ScriptedPolicy([bash("echo hello > hello.txt"), SUBMIT])
    workspaces = FakeWorkspaces()
    trajectory, episode = await run_episode(_ctx(policy, workspaces), 2)

    (workspace,) = workspaces.opened
    assert workspace.spec.job_id == "job-1" and workspace.spec.files == SCENARIO.files
    assert workspace.commands == ["echo hello > hello.txt"]
    assert workspace.checks == [SCENARIO.check] and workspace.closed
    assert (episode.finish, episode.turns, episode.check_ran, episode.check_passed) == (
        "submit",
        2,
        True,
        True,
    )
    assert [s.executed for s in episode.steps] == [True, False]
    assert episode.steps[1].is_submit
    turns = trajectory.messages_and_choices[PROMPT:]
    assert [m["role"] if isinstance(m, dict) else "choice" for m in turns] == [
        "choice",
        "user",
        "choice",
    ]
    assert "ran echo hello > hello.txt" in _observation(trajectory, 0)
    assert (trajectory.metrics["turns"], trajectory.metrics["check_passed"]) == (2, True)
    assert trajectory.metadata["rollout_index"] == 2 and trajectory.metadata["policy"] == "agent@3"


async def test_choices_keep_their_logprobs_and_token_ids() -> None:
    trajectory, _ = await run_episode(_ctx(ScriptedPolicy([SUBMIT]), FakeWorkspaces()), 0)
    choice = trajectory.messages_and_choices[-1]
    assert isinstance(choice, Choice)
    assert choice.logprobs is not None and len(choice.logprobs.content or []) == 2
    assert choice.model_extra is not None and choice.model_extra["token_ids"] == [100, 200]


async def test_stops_at_max_turns() -> None:
    policy = ScriptedPolicy([bash("ls")])
    workspaces = FakeWorkspaces(check_passes=False)
    _, episode = await run_episode(_ctx(policy, workspaces, max_turns=3), 0)
    assert (episode.finish, episode.turns, episode.check_passed) == ("max_turns", 3, False)
    assert workspaces.opened[0].commands == ["ls"] * 3
    assert len(policy.calls) == 3


async def test_stops_before_a_turn_that_would_overflow_the_context() -> None:
    # After turn 1 the conversation holds 1900 + 100 tokens: 2000 + 64 > 2048.
    policy = ScriptedPolicy([bash("ls")], usage=lambda turn: Usage(1900, 100))
    _, episode = await run_episode(_ctx(policy, FakeWorkspaces()), 0)
    assert (episode.finish, episode.turns) == ("context", 1)
    assert episode.check_ran  # the check still says whether the task got done
    assert len(policy.calls) == 1


async def test_no_usage_means_no_budget_stop() -> None:
    policy = ScriptedPolicy([bash("ls")], usage=lambda turn: None)
    _, episode = await run_episode(_ctx(policy, FakeWorkspaces(), max_turns=2), 0)
    assert episode.finish == "max_turns"


async def test_invalid_format_answers_the_format_help_and_runs_nothing() -> None:
    policy = ScriptedPolicy(["I would run ls", SUBMIT])
    workspaces = FakeWorkspaces()
    trajectory, episode = await run_episode(_ctx(policy, workspaces), 0)
    assert workspaces.opened[0].commands == []
    first = episode.steps[0]
    assert not first.valid_format and not first.executed
    observation = _observation(trajectory, 0)
    assert observation.startswith("Format error: no ```bash code block found")
    assert FORMAT_HELP in observation
    assert episode.finish == "submit"


async def test_failing_command_shows_its_exit_code() -> None:
    workspaces = FakeWorkspaces(exit_codes={"false": 1})
    trajectory, episode = await run_episode(
        _ctx(ScriptedPolicy([bash("false"), SUBMIT]), workspaces), 0
    )
    assert episode.steps[0].exit_code == 1
    assert "exit_code: 1" in _observation(trajectory, 0)


async def test_workspace_is_closed_when_the_policy_fails() -> None:
    workspaces = FakeWorkspaces()
    with pytest.raises(RuntimeError, match="policy endpoint broke"):
        await run_episode(_ctx(ScriptedPolicy([bash("ls")], fail_on_turn=1), workspaces), 0)
    assert workspaces.opened[0].closed and workspaces.opened[0].checks == []


class _RefusesTurn(ScriptedPolicy):
    """Refuses call `refused` (0-based) as vLLM refuses a prompt past the model's context."""

    def __init__(self, script: Sequence[str], refused: int) -> None:
        super().__init__(script)
        self.refused = refused

    async def complete(self, messages: Sequence[Any], **kwargs: Any) -> PolicyTurn:
        if len(self.calls) == self.refused:
            self.calls.append(list(messages))
            raise ContextOverflow("HTTP 400: This model's maximum context length is 2048 tokens")
        return await super().complete(messages, **kwargs)


async def test_a_turn_the_policy_refuses_for_its_context_ends_the_episode_kept() -> None:
    policy = _RefusesTurn([bash("ls")], refused=1)
    workspaces = FakeWorkspaces()
    trajectory, episode = await run_episode(_ctx(policy, workspaces), 0)
    assert (episode.finish, episode.turns) == ("context", 1)  # not a failed episode
    assert episode.check_ran  # the check still says whether the task got done
    assert len(trajectory.messages_and_choices) == PROMPT + 2  # the turn and its observation


async def test_a_single_answer_refused_for_its_context_ends_the_episode() -> None:
    scenario = get_environment("math-single").scenarios()[0]
    task = _task(environment="math-single", scenario_id=scenario.id)
    policy = _RefusesTurn(["4"], refused=0)
    ctx = EpisodeContext(task, scenario, policy, FakeWorkspaces(), SETTINGS, agent="single")
    trajectory, episode = await run_episode(ctx, 0)
    assert (episode.finish, episode.turns) == ("context", 0)
    assert "maximum context length" in trajectory.logs[-1]
