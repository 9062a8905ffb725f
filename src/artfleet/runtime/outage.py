"""Riding out an outage of something a service depends on, within a budget.

A caller that met the outage waits here: the dependency is probed with a growing pause
until it answers, and only an outage longer than the budget (counted from its first sign)
ends the wait, with an error naming the budget's setting and the last reason.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

# None: the dependency answers as needed; otherwise why not, in its words.
Probe = Callable[[], Awaitable[str | None]]
Sleep = Callable[[float], Awaitable[None]]


class OutageTooLong(RuntimeError):
    """The dependency stayed unavailable past the outage budget."""


class OutageClock:
    """One outage budget: when the first outage began, and how long they may last."""

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget_s = budget_s
        self._clock = clock
        self._since: float | None = None

    def started(self) -> None:
        if self._since is None:
            self._since = self._clock()

    @property
    def elapsed_s(self) -> float:
        return 0.0 if self._since is None else self._clock() - self._since

    def spent(self) -> bool:
        return self._since is not None and self.elapsed_s > self.budget_s


async def wait_until_back(
    probe: Probe,
    outage: OutageClock,
    first_error: str,
    *,
    what: str,
    setting: str,
    sleep: Sleep = asyncio.sleep,
    pause_s: float = 1.0,
    max_pause_s: float = 10.0,
) -> None:
    """Returns once `probe` answers None; raises OutageTooLong once the outage has lasted
    longer than its budget."""
    outage.started()
    why = first_error
    while True:
        if outage.spent():
            raise OutageTooLong(
                f"{what} was unavailable for {outage.elapsed_s:.0f}s "
                f"(outage budget {outage.budget_s:g}s, {setting}): {why}"
            )
        await sleep(pause_s)
        pause_s = min(pause_s * 2, max_pause_s)
        answer = await probe()
        if answer is None:
            return
        why = answer
