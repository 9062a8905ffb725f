"""Sessions of the Tinker-compatible API: who holds which training clients and samplers.

A session lives while its client heartbeats. One silent for `idle_s` (or finished) has
its training clients released from memory; their saved weights stay on disk.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

from artfleet.contracts.errors import FailedPrecondition, NotFound


@dataclass
class Sampler:
    sampling_session_id: str
    base_model: str
    model_path: str  # tinker://... or "" for the base model
    served_name: str  # what the serving engine calls it: name@step or the base model
    context: int = 0  # the most tokens of a prompt and its sample (0: not known)


@dataclass
class Session:
    session_id: str
    tags: list[str]
    user_metadata: dict[str, str]
    last_seen: float = field(default_factory=time.monotonic)
    finished: bool = False
    clients: set[str] = field(default_factory=set)  # training run ids
    samplers: dict[str, Sampler] = field(default_factory=dict)


class Sessions:
    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self._sessions: dict[str, Session] = {}
        self._ended: set[str] = set()  # finished or expired: answered as such, not unknown

    def create(self, tags: list[str], user_metadata: dict[str, str]) -> Session:
        session = Session(secrets.token_hex(6), tags, user_metadata)
        self._sessions[session.session_id] = session
        return session

    def get(self, session_id: str) -> Session:
        """A live session; NotFound for an unknown one, FailedPrecondition for one that is
        finished or expired."""
        session = self._sessions.get(session_id)
        if session_id in self._ended:
            raise FailedPrecondition(f"session {session_id!r} has ended (finished or expired)")
        if session is None:
            raise NotFound(
                f"no session {session_id!r} (unknown, or the trainer restarted since: "
                "start a new session)"
            )
        if session.finished:
            raise FailedPrecondition(f"session {session_id!r} is finished")
        return session

    def heartbeat(self, session_id: str) -> None:
        self.get(session_id).last_seen = time.monotonic()

    def sampler(self, sampling_session_id: str) -> Sampler:
        session_id = sampling_session_id.split(":", 1)[0]
        session = self._sessions.get(session_id)
        found = session.samplers.get(sampling_session_id) if session is not None else None
        if found is None:
            raise NotFound(f"no sampling session {sampling_session_id!r}")
        return found

    def expired(self) -> list[Session]:
        """Sessions that stopped heartbeating (marked finished) and finished ones, removed."""
        cutoff = time.monotonic() - self.idle_s
        gone = [s for s in self._sessions.values() if s.finished or s.last_seen < cutoff]
        for session in gone:
            session.finished = True
            del self._sessions[session.session_id]
            self._ended.add(session.session_id)
        return gone

    def all(self) -> list[Session]:
        return list(self._sessions.values())
