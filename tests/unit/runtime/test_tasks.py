"""cancel_and_wait: a background task is stopped even when it swallows a cancel."""

from __future__ import annotations

import asyncio

import pytest

from artfleet.runtime.tasks import cancel_and_wait


async def _swallows_first_cancel(entered: asyncio.Event, beats: list[int]) -> None:
    """A heartbeat whose call swallows a cancel landing inside it, then loops on."""
    swallowed = False
    while True:
        entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed = True
        beats.append(1)


async def test_a_task_that_swallowed_a_cancel_is_cancelled_again_until_it_stops() -> None:
    entered, beats = asyncio.Event(), list[int]()
    task = asyncio.create_task(_swallows_first_cancel(entered, beats))
    await entered.wait()
    await asyncio.wait_for(cancel_and_wait(task, every_s=0.01), 30)
    assert task.cancelled() and beats == [1]  # ran on once after the first cancel


async def test_a_task_that_stops_at_once_is_waited_for() -> None:
    entered = asyncio.Event()

    async def beat() -> None:
        entered.set()
        await asyncio.sleep(3600)

    task = asyncio.create_task(beat())
    await entered.wait()
    await cancel_and_wait(task)
    assert task.cancelled()


@pytest.mark.parametrize("outcome", ["result", "error"])
async def test_a_finished_task_is_left_as_it_ended(outcome: str) -> None:
    async def ended() -> int:
        if outcome == "error":
            raise RuntimeError("boom")
        return 7

    task = asyncio.create_task(ended())
    await asyncio.wait({task})
    await cancel_and_wait(task)  # neither raises nor cancels
    assert not task.cancelled()
    if outcome == "error":
        assert isinstance(task.exception(), RuntimeError)
    else:
        assert task.result() == 7


async def test_the_caller_cancelled_while_waiting_is_cancelled() -> None:
    swallowed = 0
    let_go = asyncio.Event()
    twice = asyncio.Event()

    async def stubborn() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if let_go.is_set():
                    raise
                swallowed += 1
                if swallowed == 2:
                    twice.set()

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)  # started, in its sleep
    waiter = asyncio.create_task(cancel_and_wait(task, every_s=0.01))
    await asyncio.wait_for(twice.wait(), 30)  # cancelled again and again
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    let_go.set()
    await cancel_and_wait(task)
    assert task.cancelled()
