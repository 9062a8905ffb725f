"""Fixtures of the trainer's integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from artfleet.contracts.batches import StepBatches
from artfleet_trainer.jobs.store import JobStore


@pytest.fixture
async def job_stores(redis_url: str) -> AsyncIterator[tuple[JobStore, StepBatches]]:
    """A job store and its step batches on an emptied real Redis."""
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    yield JobStore(client), StepBatches(client)
    await client.aclose()
