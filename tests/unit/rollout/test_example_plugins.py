"""The example plugin packages (examples/), pip-installed as users install theirs: each is
found through its entry point, and its rollout plays by the rules (in-process ports; the
fleet trains both on a real one in test_first_hour)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
from openai.types.chat.chat_completion import Choice
from plugin_dist import pip_install_examples
from pydantic import SecretStr
from rollout_fakes import FakeReward, FakeWorkspaces, ScriptedPolicy, group_task

from artfleet.v1 import reward_pb2
from artfleet_rollout.agents import kinds
from artfleet_rollout.environments import get_environment
from artfleet_rollout.environments import registry as environments
from artfleet_rollout.episode import EpisodeContext, run_episode
from artfleet_rollout.ports import Workspaces
from artfleet_rollout.settings import RolloutSettings


@pytest.fixture(scope="module")
def installed(module_tmp: Callable[[str], Path]) -> Iterator[None]:
    target = pip_install_examples(module_tmp("site"))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(target))
        kinds.reload_plugins()
        environments.reload_plugins()
        yield
    environments.reload_plugins()


def _ctx(
    environment: str, scenario_id: str, script: list[str], workspaces: FakeWorkspaces
) -> EpisodeContext:
    env = get_environment(environment)
    task = group_task(environment=environment, scenario_id=scenario_id, policy="ex@1")
    settings = RolloutSettings(api_token=SecretStr("unit-test-token"))
    return EpisodeContext(
        task,
        env.get(scenario_id),
        ScriptedPolicy(script),
        cast(Workspaces, workspaces),
        settings,
        agent=env.agent,
        reward=FakeReward(_tests_rate),
    )


def _tests_rate(request: reward_pb2.ScoreGroupRequest) -> reward_pb2.ScoreGroupResponse:
    response = reward_pb2.ScoreGroupResponse()
    for episode in request.episodes:
        response.scores.add(reward=episode.tests.passed / max(episode.tests.total, 1))
    return response


def test_both_examples_are_listed_with_their_package(installed: None) -> None:
    sources = environments.environment_sources()
    assert str(sources["guess-number"]) == "artfleet-example-guess-number 0.1.0"
    assert str(sources["sandbox-coding"]) == "artfleet-example-sandbox-coding 0.1.0"
    games = get_environment("guess-number").scenarios()
    assert len(games) == 40 and sum(g.split == "test" for g in games) == 8
    tasks = get_environment("sandbox-coding")
    assert not tasks.bad_records.first and len(tasks.scenarios()) == 10


async def test_the_game_answers_each_guess_until_solved(installed: None) -> None:
    game = get_environment("guess-number").get("guess-000").payload.scenario
    low = "1" if game.secret != 1 else "2"
    ctx = _ctx("guess-number", "guess-000", ["no idea", low, str(game.secret)], FakeWorkspaces())
    trajectory, episode = await run_episode(ctx, 0)
    said = [str(m.get("content")) for m in trajectory.messages_and_choices if isinstance(m, dict)]
    assert said[2].startswith("That is not a number") and said[3] in ("Higher.", "Lower.")
    assert sum(isinstance(c, Choice) for c in trajectory.messages_and_choices) == 3
    assert trajectory.metrics["solved"] == 1.0 and trajectory.metrics["invalid"] == 1
    assert trajectory.reward == 1.0 and episode.finish == "rollout"


async def test_the_coding_task_runs_its_tests_in_the_sandbox(installed: None) -> None:
    workspaces = FakeWorkspaces()
    answer = "```python\ndef add(a, b):\n    return a + b\n```"
    trajectory, episode = await run_episode(_ctx("sandbox-coding", "add", [answer], workspaces), 0)
    [box] = workspaces.opened
    assert box.files["solution.py"] == b"def add(a, b):\n    return a + b\n"
    assert b"from solution import add" in box.files["test_solution.py"] and box.closed
    assert (episode.tests.passed, episode.tests.total) == (1, 1)  # the fake sandbox's run
    assert trajectory.reward == 1.0 and trajectory.metrics["attempts"] == 1
