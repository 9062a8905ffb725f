"""The trainer's policy gate: a step waits for its policy endpoint, a gather is not cut
short by the time the endpoint was down, and an outage past its budget ends the wait."""

from __future__ import annotations

import asyncio

import pytest

from artfleet.contracts.errors import Unavailable
from artfleet.runtime.outage import OutageTooLong
from artfleet_trainer.jobs.policy_gate import PolicyGate


class Probe:
    def __init__(self, answers: list[str | Exception | None]) -> None:
        self.answers = answers
        self.calls = 0

    async def check_policy(self, base_url: str, policy: str) -> str | None:
        self.calls += 1
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_a_served_policy_costs_one_probe_and_no_wait() -> None:
    probe = Probe([None])
    assert await PolicyGate(probe, 60).wait_serving("http://inference/v1", "m@1") == 0.0
    assert probe.calls == 1


async def test_the_gate_waits_until_the_policy_is_served() -> None:
    probe = Probe(["refused", None])
    assert await PolicyGate(probe, 60).wait_serving("http://inference/v1", "m@1") > 0
    assert probe.calls == 2


async def test_an_outage_past_the_budget_names_the_endpoint_the_setting_and_the_reason() -> None:
    probe = Probe(["refused"] * 5)
    with pytest.raises(OutageTooLong) as raised:
        await PolicyGate(probe, 0.1).wait_serving("http://inference/v1", "m@1")
    assert "http://inference/v1" in str(raised.value)
    assert "ARTFLEET_POLICY_OUTAGE_S" in str(raised.value)
    assert "refused" in str(raised.value)


async def test_watching_counts_the_down_time_and_an_unreachable_prober_is_not_an_outage() -> None:
    back = asyncio.Event()

    class BackOnce(Probe):
        async def check_policy(self, base_url: str, policy: str) -> str | None:
            answer = await super().check_policy(base_url, policy)
            if answer is None and self.calls > 2:
                # The watcher adds the outage to down_s before it next yields.
                back.set()
            return answer

    gate = PolicyGate(BackOnce([Unavailable("no rollout replica"), "refused"]), 60, 0.01)

    async def work() -> str:
        await back.wait()
        return "gathered"

    assert await gate.watched("http://inference/v1", "m@1", work()) == "gathered"
    assert gate.down_s > 0


async def test_an_outage_going_on_counts_in_down_s_before_it_ends() -> None:
    # A gather's deadline that falls inside an outage must see it (it is extended by it).
    second_probe = asyncio.Event()

    class Down(Probe):
        async def check_policy(self, base_url: str, policy: str) -> str | None:
            if self.calls == 1:
                second_probe.set()
            return await super().check_policy(base_url, policy)

    gate = PolicyGate(Down(["refused"] * 50), 600)
    waiting = asyncio.create_task(gate.wait_serving("http://inference/v1", "m@1"))
    await second_probe.wait()  # after the first pause: the outage is a second old
    assert gate.down_s >= 1.0
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert gate.down_s >= 1.0  # kept once the wait ends


async def test_an_outage_past_the_budget_while_watching_cancels_the_work() -> None:
    gate = PolicyGate(Probe(["refused"] * 20), 0.1, watch_every_s=0.01)
    cancelled = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(OutageTooLong):
        await gate.watched("http://inference/v1", "m@1", work())
    assert cancelled.is_set()


async def test_without_a_probe_the_policy_counts_as_served() -> None:
    gate = PolicyGate(None, 60)
    assert await gate.wait_serving("http://inference/v1", "m@1") == 0.0
    assert await gate.watched("u", "p", asyncio.sleep(0, result=3)) == 3


def test_a_step_that_waited_for_the_policy_says_so_in_its_line() -> None:
    from artfleet.v1 import common_pb2 as pb
    from artfleet_cli import render

    assert "waited 95s for the policy" in render.step_line(
        pb.StepSummary(step=2, policy_wait_seconds=95.2)
    )
    assert "for the policy" not in render.step_line(pb.StepSummary(step=2))
