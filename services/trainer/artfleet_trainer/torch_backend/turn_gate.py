"""The backend's gate: one holder at a time (a training step, a Tinker call, a generation
slice), the waiters served by priority, and none starved.

Tenants' steps take turns: among waiters the highest priority goes first, and equal ones
go first come, first served (as an `asyncio.Lock`'s waiters do). A job may set a priority
(its spec's `priority`; generation slices and Tinker calls wait at 0); every time a
waiter is passed over it gains one, so a low-priority job's step waits at most as many
turns as the priority difference, and a long job cannot starve a short one.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Waiter:
    priority: int
    order: int
    granted: asyncio.Future[None] = field(repr=False)
    passed: int = 0  # turns given to others while it waited

    def rank(self) -> tuple[int, int]:
        return (self.priority + self.passed, -self.order)


class TurnGate:
    """An async lock whose waiters are served by priority with aging; `async with gate:`
    waits at priority 0, `async with gate.turn(p):` at `p`."""

    def __init__(self) -> None:
        self._held = False
        self._waiters: list[_Waiter] = []
        self._order = itertools.count()

    def locked(self) -> bool:
        return self._held

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self, priority: int = 0) -> None:
        if not self._held and not self._waiters:
            self._held = True
            return
        waiter = _Waiter(priority, next(self._order), asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            await waiter.granted
        except asyncio.CancelledError:
            if waiter.granted.done() and not waiter.granted.cancelled():
                self.release()  # granted as the cancel came: hand the turn on
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        if not self._held:
            raise RuntimeError("release of a TurnGate that is not held")
        if not self._waiters:
            self._held = False
            return
        chosen = max(self._waiters, key=_Waiter.rank)
        self._waiters.remove(chosen)
        for waiter in self._waiters:
            waiter.passed += 1
        chosen.granted.set_result(None)  # still held: the turn passes to `chosen`

    @asynccontextmanager
    async def turn(self, priority: int = 0) -> AsyncIterator[None]:
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *_: object) -> None:
        self.release()
