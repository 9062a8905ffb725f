"""An episode records the policy versions that answered it (ART's initial/final policy
versions), from the served `name@step`, else from the task's dispatch-time version."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import SecretStr
from rollout_fakes import SUBMIT, FakeWorkspaces, ScriptedPolicy, bash, group_task

from artfleet_rollout.environments import get_environment
from artfleet_rollout.episode import EpisodeContext, run_episode
from artfleet_rollout.ports import PolicyTurn
from artfleet_rollout.settings import RolloutSettings

SCENARIO = get_environment("shell-tasks").get("create-hello-file")
SETTINGS = RolloutSettings(api_token=SecretStr("unit-test-token"))


class VersionedPolicy(ScriptedPolicy):
    """Answers turn k from policy version versions[k] (a training step in between)."""

    def __init__(self, script: Sequence[str], versions: list[int | None]) -> None:
        super().__init__(script)
        self.versions = versions

    async def complete(
        self, messages: Sequence[Any], *, tools: Sequence[Any] | None = None
    ) -> PolicyTurn:
        turn = await super().complete(messages, tools=tools)
        version = self.versions[len(self.calls) - 1]
        return PolicyTurn(turn.choice, turn.usage, version)


def _ctx(policy: ScriptedPolicy) -> EpisodeContext:
    task = group_task(
        group_id="g", scenario_id=SCENARIO.id, rollouts=1, max_turns=4, policy_version=7
    )
    return EpisodeContext(task, SCENARIO, policy, FakeWorkspaces(), SETTINGS)


async def test_an_episode_across_a_training_step_records_both_versions() -> None:
    policy = VersionedPolicy([bash("ls"), bash("pwd"), SUBMIT], [4, 4, 5])
    trajectory, _ = await run_episode(_ctx(policy), 0)
    assert (trajectory.initial_policy_version, trajectory.final_policy_version) == (4, 5)


async def test_without_a_served_step_the_dispatch_version_is_recorded() -> None:
    policy = VersionedPolicy([bash("ls"), SUBMIT], [None, None])
    trajectory, _ = await run_episode(_ctx(policy), 0)
    assert (trajectory.initial_policy_version, trajectory.final_policy_version) == (7, 7)
