"""The warm pool keeps pools for the most recently used task images only (bounded)."""

from __future__ import annotations

import asyncio
import itertools
import time

from artfleet_sandbox.docker_backend.pool import Pooled, WarmPool


async def _until(condition: object, deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < end, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_task_images_are_bounded_and_kept_images_stay() -> None:
    counter = itertools.count()
    removed: list[str] = []

    async def create(image: str) -> Pooled:
        n = next(counter)
        return Pooled(container_id=f"{image}#{n}", session_id=f"s{n}")

    async def remove(container_id: str) -> None:
        removed.append(container_id)

    pool = WarmPool(1, 3600, create, remove, max_images=2, keep=("base",))
    pool.refill("base")
    assert pool.take("task-a") is None and pool.take("task-b") is None  # misses, then warm
    await _until(lambda: all(pool._ready.get(i) for i in ("base", "task-a", "task-b")))
    assert pool.take("task-a") is not None  # task-a used again: task-b is the LRU
    pool.take("task-c")
    await _until(lambda: pool.images() == ["base", "task-a", "task-c"])
    await _until(lambda: len(removed) == 1 and removed[0].startswith("task-b#"))
    await _until(lambda: all(pool._ready.get(i) for i in pool.images()))
    assert pool.take("base") is not None  # a kept image is never evicted
    leftover = await pool.stop()
    assert not any(c.startswith("task-b") for c in leftover)
