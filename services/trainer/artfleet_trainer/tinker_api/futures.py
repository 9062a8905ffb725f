"""Futures of the Tinker-compatible API: each queued call's id and, once it ran, its outcome.

Ids carry this trainer process's boot id: a future from before a restart is answered as
lost (retryable: the client sends the call again), never as unknown and never by a hang.
Outcomes are kept `keep_s` after they complete (a client may poll again after a lost
answer); at most `max_pending` futures wait at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass, field

from artfleet.contracts.errors import NotFound, ResourceExhausted
from artfleet.v1 import tinker_api_pb2 as pb

PENDING_LIMIT_SETTING = "ARTFLEET_TINKER_API_MAX_QUEUED_CALLS"


@dataclass
class _Future:
    done: asyncio.Event = field(default_factory=asyncio.Event)
    outcome: pb.RetrieveResponse | None = None
    completed_at: float = 0.0


class Futures:
    def __init__(self, max_pending: int, keep_s: float = 3600.0, boot: str = "") -> None:
        self.boot = boot or secrets.token_hex(4)
        self._max_pending = max_pending
        self._keep_s = keep_s
        self._futures: dict[str, _Future] = {}
        self._count = 0

    @property
    def pending(self) -> int:
        return sum(1 for f in self._futures.values() if f.outcome is None)

    def new(self) -> str:
        self._forget_old()
        if self.pending >= self._max_pending:
            raise ResourceExhausted(
                f"{self._max_pending} calls are already queued on this trainer "
                f"({PENDING_LIMIT_SETTING}); retrieve their results first"
            )
        self._count += 1
        request_id = f"{self.boot}.{self._count}"
        self._futures[request_id] = _Future()
        return request_id

    def resolve(self, request_id: str, outcome: pb.RetrieveResponse) -> None:
        future = self._futures.get(request_id)
        if future is None or future.outcome is not None:
            return
        future.outcome = outcome
        future.completed_at = time.monotonic()
        future.done.set()

    def fail(self, request_id: str, message: str, category: str = "server") -> None:
        failure = pb.Failure(message=message, category=category)
        self.resolve(request_id, pb.RetrieveResponse(failure=failure))

    async def wait(self, request_id: str, timeout_s: float) -> pb.RetrieveResponse:
        future = self._futures.get(request_id)
        if future is None:
            if not request_id.startswith(f"{self.boot}."):
                return _lost(request_id)
            raise NotFound(f"no future {request_id!r} (unknown, or its result expired)")
        if future.outcome is None and timeout_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(future.done.wait(), timeout_s)
        return future.outcome if future.outcome is not None else pb.RetrieveResponse(pending=True)

    def fail_all(self, message: str) -> None:
        """Stopping: every waiting future fails (retryable), so no client hangs."""
        for request_id, future in self._futures.items():
            if future.outcome is None:
                failure = pb.Failure(message=message, category="server", retryable=True)
                self.resolve(request_id, pb.RetrieveResponse(failure=failure))

    def _forget_old(self) -> None:
        cutoff = time.monotonic() - self._keep_s
        for request_id in [
            r for r, f in self._futures.items() if f.outcome is not None and f.completed_at < cutoff
        ]:
            del self._futures[request_id]


def _lost(request_id: str) -> pb.RetrieveResponse:
    failure = pb.Failure(
        message=f"the call {request_id!r} was lost: the trainer restarted since it was queued; "
        "send it again (saved weights and checkpoints are kept)",
        category="server",
        retryable=True,
    )
    return pb.RetrieveResponse(failure=failure)
