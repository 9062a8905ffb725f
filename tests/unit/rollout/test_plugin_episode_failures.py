"""A plugin's failing episodes, as the group runner reports them: each failure's type and
the plugin's own frames (not the fleet's or asyncio's) reach the group result, with the
request id of the run, and the worker log names the job, step, group and those frames."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from plugin_dist import install_plugin
from pydantic import SecretStr
from rollout_fakes import FakeFleet, FakePolicies, ScriptedPolicy, group_task

from artfleet.runtime.logs import request_id
from artfleet_rollout import metrics
from artfleet_rollout.agents import kinds
from artfleet_rollout.environments import registry as environments
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.settings import RolloutSettings

# A plugin whose answer check fails in its first six episodes: a bare assert, as the user
# who reported it wrote (no message: the type and the frames say what failed).
PLUGIN = """
import itertools
import art
from artfleet_rollout.art_environment import ArtEnvironment

_started = itertools.count()


def check_answer(trajectory, number):
    assert number >= 6


async def rollout(model, scenario):
    number = next(_started)
    trajectory = art.Trajectory(
        messages_and_choices=[{"role": "user", "content": scenario["question"]}], reward=1.0
    )
    completion = await model.openai_client().chat.completions.create(
        model=model.get_inference_name(), messages=trajectory.messages()
    )
    trajectory.messages_and_choices.append(completion.choices[0])
    check_answer(trajectory, number)
    return trajectory


flaky = ArtEnvironment(rollout, scenarios=[{"id": "one", "question": "1+1?"}])
"""
MODULE = "artfleet_test_flaky"


def _line(text: str) -> int:
    return next(i for i, line in enumerate(PLUGIN.splitlines(), 1) if text in line)


@pytest.fixture(autouse=True)
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    install_plugin(
        tmp_path, monkeypatch, MODULE, PLUGIN, f"[artfleet.environments]\nflaky = {MODULE}:flaky\n"
    )
    kinds.reload_plugins()
    environments.reload_plugins()
    yield
    environments.reload_plugins()


@pytest.fixture
async def runner() -> AsyncIterator[GroupRunner]:
    fleet = FakeFleet(FakePolicies(ScriptedPolicy(["2"])))
    settings = RolloutSettings(api_token=SecretStr("unit-test-token"))
    runner = GroupRunner(settings, connect=fleet.connect, environ={})
    await runner.start()
    yield runner
    await runner.stop()


async def test_failed_episodes_carry_their_type_the_plugins_frames_and_the_request_id(
    runner: GroupRunner, caplog: pytest.LogCaptureFixture
) -> None:
    counted = metrics.EPISODE_FAILURES.labels("AssertionError")._value.get()
    task = group_task(environment="flaky", scenario_id="one", rollouts=8, job_id="job-42")
    token = request_id.set("run-5e1f")  # as the worker (or the RPC's interceptor) sets it
    try:
        with caplog.at_level(logging.WARNING, logger="artfleet_rollout.failures"):
            response = await runner.run(task)
    finally:
        request_id.reset(token)
    assert len(response.group.trajectories) == 2 and len(response.group.exceptions) == 6
    frames = [
        f"{MODULE}.py:{_line('    check_answer(trajectory, number)')} in rollout",
        f"{MODULE}.py:{_line('assert number >= 6')} in check_answer",
    ]
    for failure in response.group.exceptions:
        assert (failure.type, failure.message, list(failure.frames)) == (
            "AssertionError",
            "",
            frames,
        )
        assert failure.request_id == "run-5e1f" and "AssertionError" in failure.traceback
    assert metrics.EPISODE_FAILURES.labels("AssertionError")._value.get() == counted + 6
    logged = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(logged) == 6
    where = f"at {frames[1]} < {frames[0]}"
    for record in logged:
        message = record.getMessage()
        assert "of job job-42 step 2 group g-7 failed: AssertionError " + where in message
        assert record.exc_info is not None  # the whole traceback follows the line
