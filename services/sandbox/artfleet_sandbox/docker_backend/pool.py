"""Warm pool: started containers per image, so CreateSession skips the cold start.

A pooled container is an ordinary session container (same limits, no network, empty
workspace) with its session id chosen in advance. Taking one is a dict pop; refilling
happens in the background, one task per image.

Per-task images (SWE-bench, R2E-Gym: one image per task) get a pool at first use too, but
only the `max_images` most recently used ones keep theirs (`keep` images never lose
theirs): a job over thousands of task images cannot hold thousands of idle containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from artfleet_sandbox import metrics

log = logging.getLogger(__name__)

_RETRY_S = 10.0  # after a failed refill (engine busy, image gone), try again this late


@dataclass(frozen=True)
class Pooled:
    container_id: str
    session_id: str
    created: float = field(default_factory=time.monotonic)


Create = Callable[[str], Awaitable[Pooled]]
Remove = Callable[[str], Coroutine[Any, Any, object]]


class WarmPool:
    def __init__(
        self,
        size: int,
        max_age_s: float,
        create: Create,
        remove: Remove,
        max_images: int = 8,
        keep: Sequence[str] = (),
    ) -> None:
        self.size = size
        self.max_images = max_images
        self.keep = frozenset(keep)
        self._recent: OrderedDict[str, None] = OrderedDict()  # task images, oldest first
        self.max_age_s = max_age_s
        self._create = create
        self._remove = remove
        self._ready: dict[str, deque[Pooled]] = {}
        self._refills: dict[str, asyncio.Task[None]] = {}
        self._stopped = False
        self._removals: set[asyncio.Task[object]] = set()

    def session_ids(self) -> set[str]:
        return {p.session_id for queue in self._ready.values() for p in queue}

    def take(self, image: str) -> Pooled | None:
        """A warm container of `image`, or None (a miss); either way the pool refills."""
        queue = self._ready.setdefault(image, deque())
        taken = None
        while queue and taken is None:
            candidate = queue.popleft()
            if time.monotonic() - candidate.created > self.max_age_s:
                self._discard(candidate)
            else:
                taken = candidate
        metrics.POOL_SIZE.labels(image).set(len(queue))
        (metrics.POOL_HITS if taken else metrics.POOL_MISSES).labels(image).inc()
        self._touch(image)
        self.refill(image)
        return taken

    def _touch(self, image: str) -> None:
        if image in self.keep:
            return
        self._recent[image] = None
        self._recent.move_to_end(image)
        while len(self._recent) > self.max_images:
            self._evict(self._recent.popitem(last=False)[0])

    def _evict(self, image: str) -> None:
        """The least recently used task image loses its pool (containers removed)."""
        task = self._refills.pop(image, None)
        if task is not None:
            task.cancel()
        for pooled in self._ready.pop(image, deque()):
            self._discard(pooled)
        metrics.POOL_SIZE.labels(image).set(0)
        log.info("warm pool: %s evicted (more than %d task images)", image, self.max_images)

    def ready(self, image: str) -> int:
        """Warm containers of `image` (a pool key) waiting now."""
        return len(self._ready.get(image, ()))

    def images(self) -> list[str]:
        """Images with a pool now (kept ones and the recent task images)."""
        return sorted(self._ready)

    def refill(self, image: str) -> None:
        if self._stopped or self.size <= 0:
            return
        task = self._refills.get(image)
        if task is None or task.done():
            self._refills[image] = asyncio.create_task(self._fill(image), name=f"pool-{image}")

    def expire(self) -> int:
        """Drop containers older than max_age (the reaper calls this); returns how many."""
        dropped = 0
        for image, queue in self._ready.items():
            now = time.monotonic()
            old = [p for p in queue if now - p.created > self.max_age_s]
            if not old:
                continue
            for pooled in old:
                queue.remove(pooled)
                self._discard(pooled)
            dropped += len(old)
            metrics.POOL_SIZE.labels(image).set(len(queue))
            self.refill(image)
        return dropped

    def _discard(self, pooled: Pooled) -> None:
        # In the background (`remove` logs its own failures); stop() waits for it.
        task = asyncio.create_task(self._remove(pooled.container_id))
        self._removals.add(task)
        task.add_done_callback(self._removals.discard)

    async def _fill(self, image: str) -> None:
        queue = self._ready.setdefault(image, deque())
        while not self._stopped and len(queue) < self.size:
            try:
                pooled = await self._create(image)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("warm pool for %s: %s; retrying in %.0f s", image, exc, _RETRY_S)
                await asyncio.sleep(_RETRY_S)
                continue
            if self._stopped:
                await self._remove(pooled.container_id)
                return
            queue.append(pooled)
            metrics.POOL_SIZE.labels(image).set(len(queue))

    async def stop(self) -> list[str]:
        """Stop refilling; returns the ids of pooled containers (the caller removes them)."""
        self._stopped = True
        for task in self._refills.values():
            task.cancel()
        for task in self._refills.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._removals:
            await asyncio.gather(*self._removals, return_exceptions=True)
        ids = [p.container_id for queue in self._ready.values() for p in queue]
        for image in self._ready:
            metrics.POOL_SIZE.labels(image).set(0)
        self._ready.clear()
        return ids
