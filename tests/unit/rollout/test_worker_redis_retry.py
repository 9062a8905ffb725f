"""A claim or publish that meets a restarting Redis is tried again, not dropped (the chaos
suite lost a group whose claim failed: its Celery task was acked and nothing held a lease)."""

from __future__ import annotations

import pytest
import redis.exceptions

from artfleet_rollout import metrics
from artfleet_rollout.worker import redis_retry

RETRIES = metrics.FAILURES.labels("redis_unavailable")


async def test_redis_errors_are_retried_until_the_call_succeeds() -> None:
    calls: list[int] = []

    async def claim() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        return "claimed"

    before = RETRIES._value.get()
    assert await redis_retry(claim, pause_s=0.01) == "claimed"
    assert len(calls) == 3
    assert RETRIES._value.get() == before + 2


async def test_other_errors_and_a_long_outage_raise() -> None:
    async def broken() -> str:
        raise ValueError("not a Redis outage")

    with pytest.raises(ValueError):
        await redis_retry(broken, pause_s=0.01)

    async def down() -> str:
        raise redis.exceptions.TimeoutError("Timeout reading from socket")

    with pytest.raises(redis.exceptions.TimeoutError):
        await redis_retry(down, give_up_s=0.0, pause_s=0.01)
