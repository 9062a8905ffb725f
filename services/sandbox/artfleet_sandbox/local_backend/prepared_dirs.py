"""Session dirs of the local backend prepared ahead with a cached repo already unpacked.

Unpacking a repo writes every byte of it; on a busy disk that alone is slow (the page
cache throttles writers). After the first session of a repo, a few dirs holding it wait
here, made in the background, so a later session of that repo only takes one. Only the
`max_repos` most recently used repos keep theirs; the rest are removed. Waiting dirs live
under the backend's root, which `stop()` removes whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

Make = Callable[[str], Awaitable[str]]  # tarball -> a fresh session root holding it
Remove = Callable[[str], Coroutine[Any, Any, None]]


class SeededDirs:
    def __init__(self, size: int, make: Make, remove: Remove, max_repos: int = 8) -> None:
        self.size = size
        self.max_repos = max_repos
        self._make = make
        self._remove = remove
        self._ready: OrderedDict[str, deque[str]] = OrderedDict()  # oldest use first
        self._refills: dict[str, asyncio.Task[None]] = {}
        self._removals: set[asyncio.Task[None]] = set()
        self._stopped = False

    def ready(self, tarball: str) -> int:
        return len(self._ready.get(tarball, ()))

    def take(self, tarball: str) -> str | None:
        """A prepared root holding the repo, or None; either way the repo's dirs refill."""
        if self.size <= 0 or self._stopped:
            return None
        queue = self._ready.setdefault(tarball, deque())
        self._ready.move_to_end(tarball)
        root = queue.popleft() if queue else None
        while len(self._ready) > self.max_repos:
            self._evict(next(iter(self._ready)))
        task = self._refills.get(tarball)
        if task is None or task.done():
            self._refills[tarball] = asyncio.create_task(self._fill(tarball))
        return root

    def _evict(self, tarball: str) -> None:
        # A refill still running sees its repo gone and removes what it made.
        for root in self._ready.pop(tarball, deque()):
            task = asyncio.create_task(self._remove(root))
            self._removals.add(task)
            task.add_done_callback(self._removals.discard)

    async def _fill(self, tarball: str) -> None:
        while not self._stopped and tarball in self._ready:
            queue = self._ready[tarball]
            if len(queue) >= self.size:
                return
            try:
                root = await self._make(tarball)
            except Exception as exc:  # the session path reports such errors itself
                log.warning("preparing a session dir for %s failed: %s", tarball, exc)
                return
            if self._stopped or tarball not in self._ready:
                await self._remove(root)
                return

            queue.append(root)

    async def stop(self) -> None:
        """Stops refilling; the waiting dirs go with the backend's root. Refills are
        waited for, not cancelled: their unpacking runs on a thread that a cancel would
        leave writing into the root while it is removed."""
        self._stopped = True
        for task in [*self._refills.values(), *self._removals]:
            with contextlib.suppress(Exception):
                await task
        self._refills.clear()
        self._ready.clear()
