"""The session table every backend keeps: lookup with the right error, busy/idle tracking,
and the active-sessions gauge."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

from artfleet_sandbox import metrics
from artfleet_sandbox.backend import session_missing


class Tracked(Protocol):
    busy: int  # calls running on the session right now
    last_used: float  # time.monotonic() when the last call ended


S = TypeVar("S", bound=Tracked)


class SessionTable(Generic[S]):
    def __init__(self, replica_id: str) -> None:
        self.replica_id = replica_id
        self._items: dict[str, S] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._items

    def ids(self) -> list[str]:
        return list(self._items)

    def values(self) -> list[S]:
        return list(self._items.values())

    def add(self, session_id: str, session: S) -> None:
        self._items[session_id] = session
        metrics.ACTIVE_SESSIONS.set(len(self._items))

    def pop(self, session_id: str) -> S | None:
        session = self._items.pop(session_id, None)
        metrics.ACTIVE_SESSIONS.set(len(self._items))
        return session

    def get(self, session_id: str) -> S:
        """The open session; NOT_FOUND, or UNAVAILABLE when the id names another replica."""
        session = self._items.get(session_id)
        if session is None:
            raise session_missing(session_id, self.replica_id)
        return session

    @staticmethod
    @contextlib.contextmanager
    def in_use(session: S) -> Iterator[None]:
        # A session with a running call is never idle, however long the call runs.
        session.busy += 1
        try:
            yield
        finally:
            session.busy -= 1
            session.last_used = time.monotonic()
