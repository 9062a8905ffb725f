"""Sessions of the local backend opened ahead, their shell already running.

Bash under bubblewrap is slow to start (its namespaces and mounts come first; slower on
a busy host: docs/benchmarks.md). A session's shell
starts when it opens, but a policy that answers fast asks for the first command sooner,
and that command waited for the rest of the start. Plain sessions (no repo, no
environment of their own, the REPL on) come from here instead: a few per network mode
wait with their shell up, made in the background as they are taken. A waiting session
is an ordinary one whose id, job and idle TTL are set when it is taken, and its files
written then. Waiting sessions live under the backend's root; `stop()` ends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from artfleet_sandbox import metrics
from artfleet_sandbox.local_backend.session import LocalSession

log = logging.getLogger(__name__)

Make = Callable[[bool], Awaitable[LocalSession]]  # network -> a session, its shell running
End = Callable[[LocalSession], Coroutine[Any, Any, None]]  # kills its processes, removes its dir


def pool_label(network: bool) -> str:
    """The `image` label of the pool metrics for the local backend's sessions."""
    return "local (host network)" if network else "local"


class WarmSessions:
    def __init__(self, size: int, make: Make, end: End) -> None:
        self.size = size
        self._make = make
        self._end = end
        self._ready: dict[bool, deque[LocalSession]] = {}
        self._refills: dict[bool, asyncio.Task[None]] = {}
        self._endings: set[asyncio.Task[None]] = set()
        self._stopped = False

    def ready(self, network: bool = False) -> int:
        return len(self._ready.get(network, ()))

    def fill(self, network: bool = False) -> None:
        """Starts filling the pool of `network` sessions in the background (no-op if on)."""
        if self.size <= 0 or self._stopped:
            return
        self._ready.setdefault(network, deque())
        task = self._refills.get(network)
        if task is None or task.done():
            self._refills[network] = asyncio.create_task(self._fill(network))

    def take(self, network: bool) -> LocalSession | None:
        """A waiting session whose shell runs, or None; either way the pool refills."""
        if self.size <= 0 or self._stopped:
            return None
        queue = self._ready.setdefault(network, deque())
        taken = None
        while queue and taken is None:
            session = queue.popleft()
            if session.repl is not None and session.repl.running:
                taken = session
            else:  # its shell ended while it waited (OOM, a kill): not a fresh session
                self._end_later(session)
        label = pool_label(network)
        (metrics.POOL_HITS if taken else metrics.POOL_MISSES).labels(label).inc()
        metrics.POOL_SIZE.labels(label).set(len(queue))
        self.fill(network)
        return taken

    def _end_later(self, session: LocalSession) -> None:
        task = asyncio.create_task(self._end(session))
        self._endings.add(task)  # stop() waits for it
        task.add_done_callback(self._endings.discard)

    async def _fill(self, network: bool) -> None:
        queue = self._ready[network]
        while not self._stopped and len(queue) < self.size:
            try:
                session = await self._make(network)
            except Exception as exc:  # the session path starts its own shell and reports
                log.warning("opening a warm local session failed: %s", exc)
                return
            if self._stopped:
                await self._end(session)
                return
            queue.append(session)
            metrics.POOL_SIZE.labels(pool_label(network)).set(len(queue))

    async def stop(self) -> None:
        """Stops refilling and ends every waiting session. Refills are waited for, not
        cancelled: a cancel mid-spawn could leave a shell nobody ends."""
        self._stopped = True
        for task in [*self._refills.values(), *self._endings]:
            with contextlib.suppress(Exception):
                await task
        self._refills.clear()
        waiting = [s for queue in self._ready.values() for s in queue]
        self._ready.clear()
        await asyncio.gather(*(self._end(s) for s in waiting), return_exceptions=True)
        for network in (False, True):
            metrics.POOL_SIZE.labels(pool_label(network)).set(0)
