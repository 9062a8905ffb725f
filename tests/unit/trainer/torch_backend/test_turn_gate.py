"""The backend's gate (torch_backend/turn_gate.py): one holder, waiters by priority with
aging (none starves), first come first served among equals, a cancelled waiter leaves."""

from __future__ import annotations

import asyncio

import pytest
from waiting import wait_for_async

from artfleet_trainer.torch_backend.turn_gate import TurnGate


async def _queued(gate: TurnGate, n: int) -> None:
    await wait_for_async(f"{n} waiting", lambda: gate.waiting >= n, interval_s=0.001)


async def _served_order(gate: TurnGate, priorities: dict[str, int]) -> list[str]:
    """Each name waits at its priority while the gate is held; the order they got it."""
    order: list[str] = []

    async def take(name: str, priority: int) -> None:
        async with gate.turn(priority):
            order.append(name)

    await gate.acquire()
    tasks = []
    for name, priority in priorities.items():
        tasks.append(asyncio.create_task(take(name, priority)))
        await _queued(gate, len(tasks))  # queued in this order
    gate.release()
    await asyncio.gather(*tasks)
    return order


async def test_equal_priorities_are_first_come_first_served() -> None:
    assert await _served_order(TurnGate(), {"a": 0, "b": 0, "c": 0}) == ["a", "b", "c"]


async def test_a_higher_priority_goes_first() -> None:
    assert await _served_order(TurnGate(), {"low": 0, "high": 2, "mid": 1}) == [
        "high",
        "mid",
        "low",
    ]


async def test_a_low_priority_waiter_is_not_starved_by_a_busy_high_one() -> None:
    gate = TurnGate()
    served: list[str] = []
    low_done = asyncio.Event()

    async def low() -> None:
        async with gate.turn(0):
            served.append("low")
        low_done.set()

    async def busy_high() -> None:  # takes the gate again and again, always waiting first
        while not low_done.is_set():
            async with gate.turn(3):
                served.append("high")
                await asyncio.sleep(0)

    await gate.acquire()
    high = asyncio.create_task(busy_high())
    await _queued(gate, 1)
    task = asyncio.create_task(low())
    await _queued(gate, 2)
    gate.release()
    await asyncio.wait_for(task, 30)
    await high
    # passed over once per high turn, it is served within priority difference + 1 turns
    assert served.index("low") <= 4, served


async def test_a_cancelled_waiter_leaves_and_the_gate_goes_on() -> None:
    gate = TurnGate()
    await gate.acquire()
    waiting = asyncio.create_task(gate.acquire())
    await _queued(gate, 1)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert gate.waiting == 0
    gate.release()
    assert not gate.locked()
    async with gate:
        assert gate.locked()
    with pytest.raises(RuntimeError, match="not held"):
        gate.release()
