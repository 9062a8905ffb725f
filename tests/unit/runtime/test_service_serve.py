"""`artfleet.runtime.service.serve`: a signal while the app starts stops what had started."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from artfleet.runtime.service import free_port, serve


class SlowStart:
    """Starts a child-like resource, then waits (as vLLM's readiness wait does)."""

    def __init__(self, *, fail: bool = False, signal_at_start: bool = True) -> None:
        self.events: list[str] = []
        self.fail = fail
        self.signal_at_start = signal_at_start
        self.started = asyncio.Event()

    async def start(self) -> None:
        self.events.append("spawned")
        if self.fail:
            raise RuntimeError("the engine did not start")
        if self.signal_at_start:
            os.kill(os.getpid(), signal.SIGTERM)  # the supervisor gives up while we start
            await asyncio.Event().wait()  # never ready
        self.events.append("started")
        self.started.set()

    async def stop(self) -> None:
        self.events.append("stopped")


def test_a_signal_while_starting_cancels_the_start_and_stops() -> None:
    app = SlowStart()
    asyncio.run(asyncio.wait_for(serve(app), 30))
    assert app.events == ["spawned", "stopped"]


def test_a_started_app_stops_on_a_signal() -> None:
    app = SlowStart(signal_at_start=False)

    async def main() -> None:
        task = asyncio.ensure_future(serve(app))
        await app.started.wait()
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(task, 30)

    asyncio.run(main())
    assert app.events == ["spawned", "started", "stopped"]


def test_a_failed_start_stops_what_it_started_and_raises() -> None:
    app = SlowStart(fail=True)
    with pytest.raises(RuntimeError, match="did not start"):
        asyncio.run(serve(app))
    assert app.events == ["spawned", "stopped"]


def test_free_port_never_hands_out_a_port_twice() -> None:
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
