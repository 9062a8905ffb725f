"""ART rollout functions as environments (an `artfleet.environments` entry point naming an
ArtEnvironment), run by the `art` kind: the function is written as for ART and runs
unchanged; every choice it appends was sampled through the episode's policy port (token
ids and logprobs kept); what breaks the contract fails the episode, naming the plugin."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from art_quiz import PLUGIN
from openai.types.chat.chat_completion import Choice
from plugin_dist import install_plugin
from pydantic import SecretStr
from rollout_fakes import FakeReward, FakeWorkspaces, ScriptedPolicy, group_task

from artfleet.clients.episode import ScoringFailed, sandbox
from artfleet.contracts.art_types import art
from artfleet.specs.base import InvalidSpec
from artfleet.specs.reward import default_scorers
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2
from artfleet_rollout.agents import kinds
from artfleet_rollout.agents.kinds.art import PluginFailure
from artfleet_rollout.environments import get_environment
from artfleet_rollout.environments import registry as environments
from artfleet_rollout.episode import EpisodeContext, run_episode
from artfleet_rollout.ports import Workspaces
from artfleet_rollout.settings import RolloutSettings

NAMES = (
    "quiz",
    "quiz_file",
    "quiz_splits",
    "bad_return",
    "no_choice",
    "wrong_model",
    "hangs",
    "checked",
    "sandbox_hangs",
    "tested",
    "scores_nothing",
)
ENTRY_POINTS = "[artfleet.environments]\n" + "".join(
    f"{n.replace('_', '-')} = artfleet_test_quiz:{n}\n" for n in (*NAMES, "crashes")
)


@pytest.fixture(autouse=True)
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    install_plugin(tmp_path, monkeypatch, "artfleet_test_quiz", PLUGIN, ENTRY_POINTS)
    (tmp_path / "quiz.jsonl").write_text(
        '{"id": "f1", "question": "3+3?", "answer": "6"}\n{"question": "no id"}\nnot json\n'
    )
    kinds.reload_plugins()
    environments.reload_plugins()
    yield
    environments.reload_plugins()


async def _episode(
    environment: str,
    scenario_id: str = "one-plus-one",
    timeout_s: float = 1800.0,
    workspaces: FakeWorkspaces | None = None,
    reward: FakeReward | None = None,
) -> tuple[art.Trajectory, pb.Episode, ScriptedPolicy]:
    env = get_environment(environment)
    task = group_task(
        environment=environment, scenario_id=scenario_id, policy="quiz-model@4", policy_version=4
    )
    policy = ScriptedPolicy(["It is 2.", "Yes, 2."])
    settings = RolloutSettings(api_token=SecretStr("unit-test-token"), plugin_timeout_s=timeout_s)
    sandboxes = cast(Workspaces, workspaces or FakeWorkspaces())
    ctx = EpisodeContext(
        task, env.get(scenario_id), policy, sandboxes, settings, agent=env.agent, reward=reward
    )
    trajectory, episode = await run_episode(ctx, 0)
    return trajectory, episode, policy


async def test_an_art_rollout_runs_unchanged_and_keeps_the_sampled_tokens() -> None:
    trajectory, episode, policy = await _episode("quiz")
    choices = [c for c in trajectory.messages_and_choices if isinstance(c, Choice)]
    assert len(choices) == 2 and len(policy.calls) == 2
    # Each choice is the one the policy port sampled: token ids and logprobs on it.
    assert [(c.model_extra or {})["token_ids"] for c in choices] == [[100, 200], [101, 201]]
    assert all(c.logprobs and c.logprobs.content for c in choices)
    assert policy.calls[1][-1] == {"role": "user", "content": "Sure?"}  # its own history
    assert trajectory.reward == 1.0 and trajectory.metrics["asked"] == 2
    assert trajectory.metadata["quiz"] == "one-plus-one"
    assert trajectory.metadata["environment_plugin"] == "artfleet-test-quiz 0.1"
    assert trajectory.initial_policy_version == trajectory.final_policy_version == 4
    assert episode.finish == "rollout" and episode.agent == "art" and episode.turns == 2


def test_scenarios_come_from_a_list_a_file_or_a_function() -> None:
    listed = get_environment("quiz")
    assert listed.agent == "art" and listed.description == "Arithmetic, asked twice."
    assert {s.id: s.split for s in listed.scenarios()} == {
        "one-plus-one": "train",
        "two-plus-two": "test",
    }
    assert listed.get("one-plus-one").payload.scenario["answer"] == "2"
    from_file = get_environment("quiz-file")
    assert [s.id for s in from_file.scenarios()] == ["f1", "scenario-0001"]
    # Read beside the module that declared it; a bad line is a bad record at its line.
    assert [str(b).split(":", 2)[1:] for b in from_file.bad_records.first] == [
        ["3", " not valid JSON (Expecting value at column 1)"]
    ]
    splits = get_environment("quiz-splits")
    assert [(s.id, s.split) for s in splits.scenarios()] == [
        ("one-plus-one", "train"),
        ("two-plus-two", "test"),
    ]


def test_an_art_environments_default_reward_is_its_own() -> None:
    assert [s.name for s in default_scorers("art")] == ["rollout_reward"]


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        ("bad-return", "bad-return: the rollout returned str, not an art.Trajectory"),
        ("no-choice", "no-choice: the trajectory has no assistant turn sampled"),
        ("wrong-model", "asked for model 'gpt-4o'; this job serves 'quiz-model@4'"),
        ("hangs", "hangs: the rollout did not return within 0.2s"),
    ],
)
async def test_a_rollout_that_breaks_the_contract_fails_naming_the_plugin(
    environment: str, message: str
) -> None:
    with pytest.raises(PluginFailure) as caught:
        await _episode(environment, timeout_s=0.2)
    assert message in str(caught.value)


async def test_a_rollouts_own_exception_fails_its_episode() -> None:
    with pytest.raises(KeyError, match="answer"):
        await _episode("crashes")


async def test_a_rollout_opens_a_sandbox_of_its_episode_and_closes_it() -> None:
    workspaces = FakeWorkspaces()
    trajectory, _, _ = await _episode("checked", workspaces=workspaces)
    [box] = workspaces.opened
    assert box.spec.job_id == "job-1" and box.files == {"answer.txt": b"Yes, 2."}
    assert box.commands == ["grep -q 2 answer.txt"] and box.closed
    assert trajectory.reward == 1.0


async def test_a_rollout_stuck_in_a_sandbox_leaves_no_session_open() -> None:
    workspaces = FakeWorkspaces()
    with pytest.raises(PluginFailure, match=r"did not return within 0\.2s"):
        await _episode("sandbox-hangs", timeout_s=0.2, workspaces=workspaces)
    assert [box.closed for box in workspaces.opened] == [True]


async def test_sandbox_outside_an_episode_is_refused() -> None:
    with pytest.raises(RuntimeError, match="call it in a rollout"):
        async with sandbox():
            pass


def _by_tests(request: reward_pb2.ScoreGroupRequest) -> reward_pb2.ScoreGroupResponse:
    """The share of the episode's tests that passed, with a judge's log line."""
    response = reward_pb2.ScoreGroupResponse()
    for episode in request.episodes:
        rate = episode.tests.passed / max(episode.tests.total, 1)
        response.scores.add(reward=rate, components={"tests": rate}, logs=["judged"])
    return response


async def test_a_rollout_runs_tests_in_its_sandbox_and_scores_them() -> None:
    reward = FakeReward(_by_tests)
    trajectory, episode, _ = await _episode("tested", reward=reward)
    # The last test run is the episode's record: the `tests` scorer reads it (here, and in
    # the job's own reward after the rollout returns).
    assert (episode.tests.passed, episode.tests.total, episode.tests.resolved) == (1, 1, True)
    assert episode.check_ran and episode.check_passed
    [request] = reward.requests
    assert [s.name for s in request.spec.scorers] == ["tests", "judge"]
    assert request.spec.scorers[1].weight == 0.5
    # The reward service reads text: the sampled tokens stay in the worker.
    choices = [
        i.choice for i in request.group.trajectories[0].messages_and_choices if i.HasField("choice")
    ]
    assert choices and not any(c.token_ids for c in choices)
    assert trajectory.reward == 1.0 and trajectory.metrics["tests_passed"] == 1
    assert "judged" in trajectory.logs


async def test_a_scorer_that_fails_the_job_fails_the_rollout_naming_the_plugin() -> None:
    def fails(request: reward_pb2.ScoreGroupRequest) -> reward_pb2.ScoreGroupResponse:
        response = reward_pb2.ScoreGroupResponse()
        response.outcome.fail_job = "judge: the judge endpoint refused the key"
        return response

    with pytest.raises(ScoringFailed, match="tested: judge: the judge endpoint refused"):
        await _episode("tested", reward=FakeReward(fails))


async def test_score_names_what_is_wrong_with_its_scorers() -> None:
    with pytest.raises(InvalidSpec, match="name at least one scorer"):
        await _episode("scores-nothing", reward=FakeReward(_by_tests))
