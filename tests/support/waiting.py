"""Waiting for a condition instead of sleeping a fixed time (CI runs on a loaded machine).

`poll` returns the last value when the deadline passes, for callers that report what is
left; `wait_for` fails the test instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(
    probe: Callable[[], T],
    done: Callable[[T], bool] = bool,
    timeout_s: float = 60.0,
    interval_s: float = 0.5,
) -> T:
    """Calls `probe` until `done(value)` or `timeout_s` has passed; the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(interval_s)


def wait_for(
    what: str, probe: Callable[[], T], timeout_s: float = 60.0, interval_s: float = 0.1
) -> T:
    """The first truthy value of `probe`; fails the test after `timeout_s`."""
    value = poll(probe, bool, timeout_s, interval_s)
    assert value, f"not within {timeout_s:.0f}s: {what}"
    return value


async def wait_for_async(
    what: str, probe: Callable[[], T], timeout_s: float = 60.0, interval_s: float = 0.1
) -> T:
    """`wait_for` inside an event loop: sleeps without blocking the servers under test."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value or time.monotonic() > deadline:
            break
        await asyncio.sleep(interval_s)
    assert value, f"not within {timeout_s:.0f}s: {what}"
    return value
