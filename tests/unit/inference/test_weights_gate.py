"""No answer straddles a weight reload (artfleet_inference.engine.WeightsGate)."""

from __future__ import annotations

import asyncio

from artfleet_inference.engine import WeightsGate


async def test_a_reload_waits_for_requests_and_new_requests_wait_for_it() -> None:
    gate = WeightsGate()
    events: list[str] = []
    release_request = asyncio.Event()
    request_in = asyncio.Event()

    async def request(name: str, hold: asyncio.Event | None = None) -> None:
        async with gate.shared():
            events.append(f"{name} start")
            if hold is not None:
                request_in.set()
                await hold.wait()
            events.append(f"{name} end")

    async def reload() -> None:
        async with gate.exclusive():
            events.append("reload")

    first = asyncio.create_task(request("old", release_request))
    await request_in.wait()
    reloading = asyncio.create_task(reload())
    await asyncio.sleep(0)  # the reload is now waiting for the running request
    later = asyncio.create_task(request("new"))
    await asyncio.sleep(0)
    assert events == ["old start"]  # neither the reload nor the later request went ahead
    release_request.set()
    await asyncio.gather(first, reloading, later)
    assert events == ["old start", "old end", "reload", "new start", "new end"]


async def test_requests_share_the_weights() -> None:
    gate = WeightsGate()
    inside = 0
    most = 0
    both_in = asyncio.Event()

    async def request() -> None:
        nonlocal inside, most
        async with gate.shared():
            inside += 1
            most = max(most, inside)
            if inside == 2:
                both_in.set()
            await both_in.wait()
            inside -= 1

    await asyncio.gather(request(), request())
    assert most == 2
