"""Stopping a background task for sure."""

from __future__ import annotations

import asyncio
from typing import Any

CANCEL_EVERY_S = 1.0


async def cancel_and_wait(task: asyncio.Future[Any], every_s: float = CANCEL_EVERY_S) -> None:
    """Cancels `task` until it is done; its own outcome (result, error, cancel) is not
    raised here. One cancel is not always enough: a library may swallow a cancel that
    lands mid-call (a redis.asyncio script call did, in the chaos suite), and a lease
    heartbeat then ran on forever, holding its group after the run ended."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every_s)
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" at collection
