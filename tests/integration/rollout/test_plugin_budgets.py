"""The budget of a plugin's episodes, as for every agent kind: the job's `max_turns` counts
the rollout's policy calls, a call that would pass the context ends the episode (finish
`context`) and one past the turns too (finish `max_turns`), the conversation kept as far
as it went and scored, never a lost episode; a call's own completion limit is honoured up
to the job's `max_tokens`. Real episodes: a package installed with `pip`, the group
runner, the product's OpenAI adapter against the torch server on a tiny random Llama
(context 128 tokens), the reward service's scorers in-process."""

from __future__ import annotations

import pytest
from plugin_episodes import CONTEXT, EpisodeFleet, metadata

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


def _choices(trajectory: pb.Trajectory) -> list[pb.Choice]:
    return [i.choice for i in trajectory.messages_and_choices if i.HasField("choice")]


def _kept_and_scored(response: rollout_pb2.RunGroupResponse, fleet: EpisodeFleet) -> None:
    """Every episode came back (none lost), and the reward service scored them all."""
    assert not response.group.exceptions, [e.message for e in response.group.exceptions]
    assert len(response.group.trajectories) == 2
    [request] = fleet.reward.requests
    assert len(request.group.trajectories) == 2


async def test_max_turns_counts_a_plugins_policy_calls(fleet: EpisodeFleet) -> None:
    response = await fleet.run("endless", "task-0000", max_turns=4)
    _kept_and_scored(response, fleet)
    for trajectory, episode in zip(response.group.trajectories, response.episodes, strict=True):
        assert (episode.finish, episode.turns) == ("max_turns", 4)
        choices = _choices(trajectory)
        assert len(choices) == 4 and all(c.token_ids for c in choices)
        # As far as it went: each answer and the observation after it, in order.
        roles = [
            "assistant" if i.HasField("choice") else i.message.role
            for i in trajectory.messages_and_choices
        ]
        assert roles == ["user"] + ["assistant", "user"] * 4
        # Its own `except Exception` (and `@art.retry`) did not take the stop for an error.
        assert trajectory.reward == 0.0 and "max_turns (4)" in trajectory.logs[-1]
    import artfleet_test_shapes  # the installed plugin, as the worker imported it

    assert artfleet_test_shapes.ATTEMPTS["plays_forever"] == 2  # one start per episode


async def test_a_history_past_the_models_context_ends_the_episode_kept(
    fleet: EpisodeFleet,
) -> None:
    # 60-word observations: the third call's prompt passes the model's 128 tokens, and the
    # policy refuses it (as vLLM's 400); the episode ends there, its two turns kept.
    response = await fleet.run("outgrows", "task-0000", max_turns=50)
    _kept_and_scored(response, fleet)
    for trajectory, episode in zip(response.group.trajectories, response.episodes, strict=True):
        assert episode.finish == "context"
        assert episode.turns == len(_choices(trajectory)) >= 2
        assert "the policy refused" in trajectory.logs[-1]
        assert "context" in trajectory.logs[-1]
        assert metadata(trajectory)["max_tokens"] == 8  # its own 8, under the job's 12


async def test_a_call_that_would_pass_the_jobs_context_is_not_made(fleet: EpisodeFleet) -> None:
    # The job's budget (48) is under the model's (128): the fleet stops before the call.
    budget = 48
    response = await fleet.run("outgrows-budget", "task-0000", max_turns=50,
                               max_context_tokens=budget)  # fmt: skip
    _kept_and_scored(response, fleet)
    for trajectory, episode in zip(response.group.trajectories, response.episodes, strict=True):
        assert episode.finish == "context" and episode.turns >= 2
        assert f"pass the job's max_context_tokens ({budget})" in trajectory.logs[-1]
        for choice in _choices(trajectory):  # every call made fitted the budget
            assert len(choice.prompt_token_ids) + 8 <= budget
    assert budget < CONTEXT


async def test_the_calls_own_completion_limit_is_honoured_up_to_the_jobs(
    fleet: EpisodeFleet,
) -> None:
    fewer = await fleet.run("asks-three", "task-0000", max_tokens=12)
    for trajectory in fewer.group.trajectories:
        [choice] = _choices(trajectory)
        assert len(choice.token_ids) == 3 and choice.finish_reason == "length"
        seen = metadata(trajectory)
        assert (seen["max_tokens"], seen["max_tokens_asked"]) == (3, 3)
    more = await fleet.run("asks-more", "task-0000", max_tokens=12)
    for trajectory in more.group.trajectories:
        [choice] = _choices(trajectory)
        assert 3 < len(choice.token_ids) <= 12
        seen = metadata(trajectory)
        assert (seen["max_tokens"], seen["max_tokens_asked"]) == (12, 500)
