"""A policy outage holds a group: the episodes that met it are not failures, the group runs
again when the endpoint serves, and only an outage past its budget fails it, saying so."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import pytest
from openai import AsyncOpenAI
from pydantic import SecretStr
from rollout_fakes import SUBMIT, FakeFleet, FakePolicies, ScriptedPolicy, bash, group_task

from artfleet.runtime.outage import OutageClock, OutageTooLong, wait_until_back
from artfleet.v1 import rollout_pb2
from artfleet_rollout.adapters import OpenAIPolicy
from artfleet_rollout.group import GroupRunner, policy_outage
from artfleet_rollout.ports import PolicyTurn, PolicyUnavailable
from artfleet_rollout.settings import RolloutSettings

_NAMES: dict[str, Any] = {"what": "the policy endpoint", "setting": "ARTFLEET_POLICY_OUTAGE_S"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _probe(answers: Sequence[str | None]) -> Any:
    left = list(answers)

    async def probe() -> str | None:
        return left.pop(0)

    return probe


async def test_waiting_returns_once_the_endpoint_serves_with_a_growing_pause() -> None:
    clock = Clock()
    outage = OutageClock(600, clock)
    await wait_until_back(
        _probe(["refused", "HTTP 503: loading", None]),
        outage,
        "refused",
        **_NAMES,
        sleep=clock.sleep,
    )
    assert clock.sleeps == [1.0, 2.0, 4.0]


async def test_an_outage_past_its_budget_fails_naming_the_last_reason_and_the_setting() -> None:
    clock = Clock()
    outage = OutageClock(20, clock)
    with pytest.raises(OutageTooLong) as raised:
        await wait_until_back(
            _probe(["refused"] * 3 + ["HTTP 503: loading"] * 10),
            outage,
            "first",
            **_NAMES,
            sleep=clock.sleep,
        )
    assert "HTTP 503: loading" in str(raised.value)
    assert "ARTFLEET_POLICY_OUTAGE_S" in str(raised.value)
    assert 20 < clock.now <= 20 + 10  # one pause past the budget at most


def test_an_outage_is_found_inside_exception_groups() -> None:
    lost = PolicyUnavailable("down")
    nested = ExceptionGroup("session", [ExceptionGroup("task group", [ValueError(), lost])])
    assert policy_outage(nested) is lost
    assert policy_outage(ExceptionGroup("other", [ValueError()])) is None
    assert policy_outage(RuntimeError("the episode's own failure")) is None


class OutagePolicy(ScriptedPolicy):
    """The endpoint is down for the first `down` calls."""

    def __init__(self, down: int) -> None:
        super().__init__([bash("echo hi"), SUBMIT])
        self.down = down

    async def complete(
        self, messages: Sequence[Any], *, tools: Any = None, tool_choice: Any = None
    ) -> PolicyTurn:
        if self.down > 0:
            self.down -= 1
            raise PolicyUnavailable("http://inference:8000/v1: APIConnectionError: refused")
        return await super().complete(messages, tools=tools, tool_choice=tool_choice)


class ProbedPolicies(FakePolicies):
    def __init__(self, policy: ScriptedPolicy, probes: list[str | None]) -> None:
        super().__init__(policy)
        self.probes = probes

    async def served(self, task: rollout_pb2.GroupTask, api_key: str) -> str | None:
        return self.probes.pop(0) if self.probes else None


async def _run(policies: FakePolicies, outage_s: float) -> Any:
    settings = RolloutSettings(api_token=SecretStr("t"), policy_outage_s=outage_s)
    runner = GroupRunner(settings, connect=FakeFleet(policies).connect, environ={})
    await runner.start()
    try:
        return await runner.run(group_task(rollouts=2))
    finally:
        await runner.stop()


async def test_a_group_held_through_an_outage_runs_again_and_keeps_every_trajectory() -> None:
    policies = ProbedPolicies(OutagePolicy(down=2), probes=[None])
    response = await _run(policies, outage_s=600)
    assert len(response.group.trajectories) == 2
    assert not response.group.exceptions  # the outage is not an episode failure


async def test_a_group_fails_with_the_reason_when_the_outage_outlasts_its_budget() -> None:
    policies = ProbedPolicies(OutagePolicy(down=100), probes=["HTTP 502: bad gateway"] * 5)
    with pytest.raises(OutageTooLong, match="HTTP 502: bad gateway"):
        await _run(policies, outage_s=0.01)


async def test_an_endpoint_that_refuses_connections_is_an_outage_not_a_failure() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
    policy = OpenAIPolicy(client, model="m", temperature=1.0, max_tokens=8, timeout_s=5)
    async with client:
        with pytest.raises(PolicyUnavailable, match=f"127.0.0.1:{port}"):
            await policy.complete([{"role": "user", "content": "hi"}])
