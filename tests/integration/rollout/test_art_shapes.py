"""ART rollout functions in the shapes ART's examples write, from a package installed with
`pip` as a user installs theirs, run by a rollout group runner against a real policy
endpoint (the torch server on a tiny random Llama, over HTTP, through the product's
OpenAI adapter) and scored by the reward service's own scorers:

- each shape is bound by its signature at load and gets the job's step and validation
  flag; every shape reads them from `rollout_context()`; a rollout without scenarios runs
  on the environment's task slots;
- a signature the fleet cannot call is broken at load: listed so (ListPlugins, which the
  API's /health shows; `envs list`) and refused at submit (DescribeEnvironment).

The budgets of plugin episodes are in test_plugin_budgets.py."""

from __future__ import annotations

import pytest
from plugin_episodes import EpisodeFleet, metadata

from artfleet.contracts.errors import InvalidArgument
from artfleet.v1 import rollout_pb2
from artfleet_rollout.environments import get_environment
from artfleet_rollout.servicer import RolloutServicer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
PACKAGE = "artfleet-test-shapes"


@pytest.mark.parametrize(
    ("environment", "got"),
    [
        ("scenario-shape", {"got_scenario": "p1"}),
        ("own-task", {"got_step": 3, "got_is_validation": False}),
        ("step-shape", {"got_step": 3}),
        ("model-shape", {}),
        ("keyword-shape", {"got_step": 3, "got_is_validation": False}),
        ("positional-shape", {"got_step": 3}),
    ],
)
async def test_each_art_shape_runs_with_the_step_and_split(
    fleet: EpisodeFleet, environment: str, got: dict[str, object]
) -> None:
    scenario = "p1" if environment == "scenario-shape" else "task-0000"
    response = await fleet.run(environment, scenario, step=3, rollouts=2)
    assert not response.group.exceptions, response.group.exceptions
    assert [e.finish for e in response.episodes] == ["rollout", "rollout"]
    for index, trajectory in enumerate(response.group.trajectories):
        seen = metadata(trajectory)
        assert {k: seen[k] for k in got} == got
        assert not any(k.startswith("got_") for k in set(seen) - set(got))
        assert (seen["ctx_step"], seen["ctx_split"], seen["ctx_validation"]) == (3, "train", False)
        assert (seen["ctx_index"], seen["ctx_scenario"]) == (index, scenario)
        assert seen["environment_plugin"] == f"{PACKAGE} 0.1"
        assert trajectory.reward == 1.0  # its own reward, through `rollout_reward`
        items = trajectory.messages_and_choices
        assert any(i.HasField("choice") and i.choice.token_ids for i in items)
    assert len(fleet.reward.requests) == 1  # the group was scored


async def test_an_evaluations_episode_is_a_validation_one(fleet: EpisodeFleet) -> None:
    response = await fleet.run("own-task", "eval-0001", job_id="shapes-job-eval", step=2)
    for trajectory in response.group.trajectories:
        seen = metadata(trajectory)
        assert (seen["got_step"], seen["got_is_validation"]) == (2, True)
        assert (seen["ctx_split"], seen["ctx_validation"]) == ("test", True)


def test_a_rollout_without_scenarios_lists_its_task_slots(plugin: None) -> None:
    slots = get_environment("own-task").scenarios()
    assert [(s.id, s.split) for s in slots] == [
        ("task-0000", "train"),
        ("task-0001", "train"),
        ("task-0002", "train"),
        ("eval-0000", "test"),
        ("eval-0001", "test"),
    ]
    # Without counts: one slot each.
    assert [s.id for s in get_environment("step-shape").scenarios()] == ["task-0000", "eval-0000"]
    assert "draws its own task" in slots[0].instruction


BROKEN = {
    "config-shape": "the fleet has nothing to pass as 'config'",
    "puzzle-without-scenarios": "takes a scenario ('scenario') but the environment names none",
}


async def test_a_rollout_it_cannot_call_is_broken_at_load_and_refused_at_submit(
    plugin: None,
) -> None:
    servicer = RolloutServicer.__new__(RolloutServicer)  # these RPCs need no runner
    # What the API's /health shows (and the metric exports): listed broken, with the reason.
    reply = await servicer.ListPlugins(rollout_pb2.ListPluginsRequest(), None)
    states = {p.name: (p.state, p.error) for p in reply.plugins if p.package == PACKAGE}
    for name, reason in BROKEN.items():
        state, error = states[name]
        assert state == "broken" and reason in error, error
        assert "rollout(model, step, is_validation)" in error  # the shapes it may take
    assert {n for n, (state, _) in states.items() if state == "loaded"} == {
        "scenario-shape", "own-task", "step-shape", "model-shape", "keyword-shape",
        "positional-shape", "endless", "outgrows", "outgrows-budget", "asks-three",
        "asks-more",
    }  # fmt: skip
    # A job naming one is refused at submit: the trainer describes the environment first.
    for name, reason in BROKEN.items():
        request = rollout_pb2.DescribeEnvironmentRequest(name=name)
        with pytest.raises(InvalidArgument, match="failed to load") as caught:
            await servicer.DescribeEnvironment(request, None)
        assert caught.value.field == "name" and reason in str(caught.value)
