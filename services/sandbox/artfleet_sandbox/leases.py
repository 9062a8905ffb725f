"""Owner leases: a client that died takes its sessions with it within a lease.

A session created with an `owner` (a rollout worker process) is held under that owner's
lease; the owner renews it (`Sandbox.RenewLease`) every third of it while it lives. When
an owner's lease runs out (SIGKILL, OOM, a lost host: nobody renews), this replica closes
all of its sessions, instead of waiting for their idle TTL (30 min by default). The table
lives in the replica's memory: a restarted replica has lost its sessions anyway.

Backend-agnostic: it closes through `SandboxBackend.close_session`, which is idempotent,
so a session that was closed (or idle-reaped) meanwhile costs nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from artfleet.runtime.tasks import cancel_and_wait
from artfleet_sandbox import metrics
from artfleet_sandbox.backend import InvalidArgument

log = logging.getLogger(__name__)

MAX_OWNER_CHARS = 256


@dataclass
class _Owner:
    expires: float
    sessions: set[str] = field(default_factory=set)


def check_owner(owner: str) -> str:
    if len(owner) > MAX_OWNER_CHARS or not owner.isprintable():
        raise InvalidArgument(f"owner must be printable and at most {MAX_OWNER_CHARS} characters")
    return owner


class OwnerLeases:
    """start() runs the reaper; hold/drop/renew on the event loop; stop()."""

    def __init__(
        self,
        close: Callable[[str], Awaitable[bool]],
        *,
        default_s: float = 60.0,
        min_s: float = 1.0,
        max_s: float = 3600.0,
        check_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._close = close
        self.default_s, self.min_s, self.max_s = default_s, min_s, max(min_s, max_s)
        self._check_s = check_s
        self._clock = clock
        self._owners: dict[str, _Owner] = {}
        self._owner_of: dict[str, str] = {}  # session id -> owner
        self._task: asyncio.Task[None] | None = None

    def lease(self, requested: float) -> float:
        """The lease a request gets: 0 = the default, then within [min, max]."""
        if not math.isfinite(requested) or requested < 0:
            raise InvalidArgument(
                f"owner_lease_s must be a non-negative number (0 = default), got {requested}"
            )
        return min(max(requested or self.default_s, self.min_s), self.max_s)

    def hold(self, session_id: str, owner: str, lease_s: float) -> None:
        """`session_id` is `owner`'s; creating a session renews the owner's lease."""
        entry = self._owners.setdefault(owner, _Owner(0.0))
        entry.expires = max(entry.expires, self._clock() + lease_s)
        entry.sessions.add(session_id)
        self._owner_of[session_id] = owner

    def drop(self, session_id: str) -> None:
        """The session was closed: it no longer counts for its owner."""
        owner = self._owner_of.pop(session_id, None)
        entry = self._owners.get(owner) if owner is not None else None
        if owner is not None and entry is not None:
            entry.sessions.discard(session_id)
            if not entry.sessions:
                del self._owners[owner]

    def renew(self, owner: str, lease_s: float) -> int:
        """Extends `owner`'s lease; returns how many sessions it holds here. An owner with
        none here is not recorded (renewals must not grow the table)."""
        entry = self._owners.get(owner)
        if entry is None:
            return 0
        entry.expires = max(entry.expires, self._clock() + lease_s)
        return len(entry.sessions)

    def sessions_of(self, owner: str) -> set[str]:
        entry = self._owners.get(owner)
        return set(entry.sessions) if entry else set()

    async def reap(self) -> int:
        """Closes the sessions of every owner whose lease ran out; returns how many."""
        now = self._clock()
        expired = [o for o, e in self._owners.items() if e.expires <= now]
        closed = 0
        for owner in expired:
            entry = self._owners.pop(owner)
            log.warning(
                "owner %r did not renew its lease: closing its %d session(s)",
                owner,
                len(entry.sessions),
            )
            for session_id in sorted(entry.sessions):
                self._owner_of.pop(session_id, None)
                try:
                    if await self._close(session_id):
                        closed += 1
                        metrics.REAPED_SESSIONS.labels("lease").inc()
                except Exception:  # one bad session must not keep the others open
                    log.exception("closing session %s of a lapsed owner failed", session_id)
        return closed

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._reap_forever(), name="sandbox-owner-leases")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self._check_s)
            try:
                await self.reap()
            except Exception:
                log.exception("owner lease reaper failed")
