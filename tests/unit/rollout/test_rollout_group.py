"""The group runner against in-process policy, workspace and reward implementations:
lifecycle, API keys, lost-replica retries, and how reward scores and outcomes apply."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import pytest_asyncio
from pydantic import SecretStr
from rollout_fakes import (
    SUBMIT,
    FakeFleet,
    FakePolicies,
    ScriptedPolicy,
    bash,
    group_task,
    reward_by_check,
)

from artfleet.contracts import codec
from artfleet.contracts.errors import InvalidArgument
from artfleet.v1 import reward_pb2
from artfleet_rollout.environments import Environment, Scenario, register_environment
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.ports import PolicyTurn
from artfleet_rollout.scoring import BadScores

TOKEN = "fleet-token-for-tests"
SETTINGS_KW = dict(api_token=SecretStr(TOKEN), episode_retries=2)


def _runner(fleet: FakeFleet, environ: dict[str, str] | None = None) -> GroupRunner:
    from artfleet_rollout.settings import RolloutSettings

    settings = RolloutSettings(**SETTINGS_KW)  # type: ignore[arg-type]
    return GroupRunner(settings, connect=fleet.connect, environ=environ or {})


@pytest.fixture
def fleet() -> FakeFleet:
    return FakeFleet(FakePolicies(ScriptedPolicy([bash("echo hello > hello.txt"), SUBMIT])))


@pytest_asyncio.fixture
async def runner(fleet: FakeFleet) -> AsyncIterator[GroupRunner]:
    runner = _runner(fleet)
    await runner.start()
    yield runner
    await runner.stop()


# ---------------------------------------------------------------- lifecycle and keys
async def test_connections_are_opened_once_and_reused_across_groups(fleet: FakeFleet) -> None:
    runner = _runner(fleet)
    with pytest.raises(RuntimeError, match="before start"):
        await runner.run(group_task())
    await runner.start()
    first = await runner.run(group_task(group_id="a"))
    second = await runner.run(group_task(group_id="b"))
    assert len(first.group.trajectories) == len(second.group.trajectories) == 3
    assert (fleet.connects, fleet.closes) == (1, 0)
    await runner.stop()
    assert fleet.closes == 1
    with pytest.raises(RuntimeError, match="before start"):
        await runner.run(group_task())


def test_run_on_another_loop_is_refused(fleet: FakeFleet) -> None:
    # Loops of its own, not asyncio.run: where ART was imported into this process,
    # nest_asyncio's asyncio.run reuses one loop.
    runner = _runner(fleet)
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        first.run_until_complete(runner.start())
        with pytest.raises(RuntimeError, match="another event loop"):
            second.run_until_complete(runner.run(group_task()))
    finally:
        first.close()
        second.close()


async def test_policy_key_is_the_fleet_token_or_the_named_variable(fleet: FakeFleet) -> None:
    runner = _runner(fleet, environ={"JUDGE_KEY": "sk-from-env"})
    await runner.start()
    await runner.run(group_task(rollouts=1))
    await runner.run(group_task(rollouts=1, model_api_key_env="JUDGE_KEY"))
    await runner.stop()
    assert fleet.policies.keys == [TOKEN, "sk-from-env"]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("MISSING_KEY", "MISSING_KEY is not set"),
        ("ARTFLEET_REDIS_URL", "fleet setting"),
        ("BAD-NAME", "not an environment variable name"),
    ],
)
async def test_unusable_key_variable_is_invalid_argument(
    runner: GroupRunner, fleet: FakeFleet, name: str, message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message) as info:
        await runner.run(group_task(model_api_key_env=name))
    assert info.value.field == "task.model_api_key_env"
    assert fleet.workspaces.opened == []


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"rollouts": 0}, "task.rollouts"),
        ({"policy": ""}, "task.policy"),
        ({"scenario_id": "nope"}, "task.scenario_id"),
        ({"environment": "nope"}, "task.environment"),
    ],
)
async def test_bad_task_is_invalid_argument(
    runner: GroupRunner, overrides: dict[str, object], field: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        await runner.run(group_task(**overrides))
    assert info.value.field == field


# ---------------------------------------------------------------- episodes
async def test_lost_workspace_starts_the_episode_again(
    runner: GroupRunner, fleet: FakeFleet
) -> None:
    fleet.workspaces.losses = 2
    response = await runner.run(group_task())
    assert len(response.group.trajectories) == 3 and not response.group.exceptions
    assert len(fleet.workspaces.opened) == 5  # two episodes started over
    assert all(w.closed for w in fleet.workspaces.opened)


async def test_episode_lost_more_often_than_the_retries_is_a_group_exception(
    runner: GroupRunner, fleet: FakeFleet
) -> None:
    fleet.workspaces.losses = 100
    response = await runner.run(group_task(rollouts=2))
    assert not response.group.trajectories and len(response.group.exceptions) == 2
    assert "WorkspaceLost" in response.group.exceptions[0].type
    assert fleet.reward.requests == []  # nothing to score
    assert not response.HasField("outcome")


async def test_failed_episode_is_an_exception_and_the_rest_is_scored(
    runner: GroupRunner, fleet: FakeFleet
) -> None:
    fleet.policies.policy_.fail_on_turn = 1
    fleet.policies.policy_.script = [SUBMIT]  # most episodes end before turn 1 ...
    response = await runner.run(group_task(rollouts=2))
    assert len(response.group.trajectories) == 2 and not response.group.exceptions
    fleet.policies.policy_.script = [bash("ls")]  # ... these reach it and fail
    response = await runner.run(group_task(rollouts=2))
    assert not response.group.trajectories and len(response.group.exceptions) == 2
    assert "policy endpoint broke" in response.group.exceptions[0].message


# ---------------------------------------------------------------- scores
async def test_scores_apply_to_the_rollouts_group(runner: GroupRunner, fleet: FakeFleet) -> None:
    def answer(request: reward_pb2.ScoreGroupRequest) -> reward_pb2.ScoreGroupResponse:
        response = reward_by_check(request)
        for i, score in enumerate(response.scores):
            score.reward = 0.5 + i
            score.metrics["judge_latency_s"] = 1.5
            score.logs.append(f"judged {i}")
        response.scores[1].independent_reward = 0.75
        return response

    fleet.reward.answer = answer
    response = await runner.run(group_task())
    group = codec.group_from_proto(response.group)
    assert [t.reward for t in group.trajectories] == [0.5, 1.5, 2.5]
    first = group.trajectories[0]
    assert first.metrics["reward_task_check"] == 1.0 and first.metrics["reward_process"] == 0.25
    assert first.metrics["judge_latency_s"] == 1.5 and first.logs[-1] == "judged 0"
    assert "independent_reward" not in first.metrics
    assert group.trajectories[1].metrics["independent_reward"] == 0.75
    assert group.metadata == {"group_id": "g-7", "scenario_id": "create-hello-file", "step": 2}
    assert len(response.episodes) == 3 and response.HasField("outcome")


async def test_reward_request_has_no_tokens_but_the_response_does(
    runner: GroupRunner, fleet: FakeFleet
) -> None:
    response = await runner.run(group_task(rollouts=2))
    (request,) = fleet.reward.requests
    assert len(request.episodes) == 2 and request.spec == group_task().reward

    def choices(group: object) -> list:
        return [
            i.choice
            for t in group.trajectories  # type: ignore[attr-defined]
            for i in t.messages_and_choices
            if i.WhichOneof("item") == "choice"
        ]

    sent = choices(request.group)
    assert sent and all(not c.has_logprobs and not c.logprobs for c in sent)
    assert all(not c.has_token_ids and not c.token_ids and not c.prompt_token_ids for c in sent)
    assert sent[0].message.content  # the text is there for the scorers
    kept = choices(response.group)
    assert kept and all(c.has_logprobs and len(c.logprobs) == 2 for c in kept)


async def test_dropped_trajectory_leaves_with_its_episode(
    runner: GroupRunner, fleet: FakeFleet
) -> None:
    def answer(request: reward_pb2.ScoreGroupRequest) -> reward_pb2.ScoreGroupResponse:
        response = reward_by_check(request)
        for i, score in enumerate(response.scores):
            score.reward = float(i)
        response.scores[1].dropped = True
        response.outcome.dropped.append(1)
        response.outcome.failures.add(
            scorer="judge", type="timeout", message="slow", trajectory=1, action="drop_trajectory"
        )
        return response

    fleet.reward.answer = answer
    fleet.policies.policy_.script = [bash("ls"), SUBMIT]
    response = await runner.run(group_task())
    assert [t.reward for t in response.group.trajectories] == [0.0, 2.0]
    assert [t.metadata["rollout_index"].int_value for t in response.group.trajectories] == [0, 2]
    assert len(response.episodes) == 2
    assert list(response.outcome.dropped) == [1]
    assert response.outcome.failures[0].action == "drop_trajectory"


@pytest.mark.parametrize("kind", ["group_dropped", "fail_job"])
async def test_stopped_group_has_no_trajectories_and_says_why(
    runner: GroupRunner, fleet: FakeFleet, kind: str
) -> None:
    def answer(request: reward_pb2.ScoreGroupRequest) -> reward_pb2.ScoreGroupResponse:
        response = reward_pb2.ScoreGroupResponse()
        if kind == "fail_job":
            response.outcome.fail_job = "judge (unavailable): no judge"
        else:
            response.outcome.group_dropped = True
        response.outcome.failures.add(scorer="judge", type="unavailable", trajectory=-1)
        return response

    fleet.reward.answer = answer
    response = await runner.run(group_task())
    assert not response.group.trajectories and not response.episodes
    assert response.group.metadata["group_id"].string_value == "g-7"
    assert response.outcome.group_dropped == (kind == "group_dropped")
    assert response.outcome.fail_job == (
        "judge (unavailable): no judge" if kind == "fail_job" else ""
    )
    assert response.outcome.failures[0].scorer == "judge"
    # Outcomes travel as fields, never as exception-type strings.
    assert not response.group.exceptions


async def test_scores_that_do_not_fit_the_group_are_an_error(
    runner: GroupRunner, fleet: FakeFleet
) -> None:
    fleet.reward.answer = lambda request: reward_pb2.ScoreGroupResponse()
    with pytest.raises(BadScores, match="0 scores for 3 trajectories"):
        await runner.run(group_task())


# ---------------------------------------------------------------- the job's max_concurrent
class CountingPolicy(ScriptedPolicy):
    """Records the most turns in flight at once; each turn yields once to the others."""

    def __init__(self) -> None:
        super().__init__([bash("echo hello > hello.txt"), SUBMIT])
        self.in_flight = self.peak = 0

    async def complete(
        self,
        messages: Sequence[Any],
        *,
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
    ) -> PolicyTurn:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0)  # a yield, so concurrent episodes can enter
        try:
            return await super().complete(messages, tools=tools, tool_choice=tool_choice)
        finally:
            self.in_flight -= 1


@pytest.mark.parametrize(("max_concurrent", "peak"), [(0, 6), (2, 2), (1, 1)])
async def test_a_jobs_max_concurrent_bounds_its_episodes_across_its_groups(
    max_concurrent: int, peak: int
) -> None:
    policy = CountingPolicy()
    runner = _runner(FakeFleet(FakePolicies(policy)))
    await runner.start()
    tasks = [group_task(group_id=g, max_concurrent=max_concurrent) for g in ("a", "b")]
    responses = await asyncio.gather(*(runner.run(t) for t in tasks))
    await runner.stop()
    assert [len(r.group.trajectories) for r in responses] == [3, 3]
    assert policy.peak == peak


# ---------------------------------------------------------------- a task's own tool_choice
@pytest.mark.parametrize(
    ("own", "sent"),
    [(None, "required"), ({"type": "function", "function": {"name": "bash"}}, None)],
)
async def test_a_tasks_own_tool_choice_wins_over_its_environments(own: Any, sent: Any) -> None:
    name = f"choice-test-{own is None}"
    scenario = Scenario(id="s1", split="train", title="t", instruction="do", tool_choice=own)
    register_environment(
        name, lambda: Environment(name, "d", [scenario], agent="tools", tool_choice="required")
    )
    policy = ScriptedPolicy(["no tool call"])
    runner = _runner(FakeFleet(FakePolicies(policy)))
    await runner.start()
    try:
        await runner.run(group_task(environment=name, scenario_id="s1", rollouts=1, max_turns=1))
    finally:
        await runner.stop()
    assert policy.tool_choices == [own if own is not None else sent]
