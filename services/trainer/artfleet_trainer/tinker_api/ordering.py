"""One training client's calls, run one at a time in `seq_id` order.

The SDK numbers each client's calls 1, 2, 3, ... and may send them out of order (chunks of
one forward_backward in parallel) or twice (a retry after a lost answer): a call waits
for its predecessors, and a seq_id seen before is the same call, answered by the same
future.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from artfleet.runtime.tasks import cancel_and_wait

Run = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    """A refused call's place in the order."""


class ClientQueue:
    """A client's calls; its first (seq_id 0) is the one that creates it."""

    def __init__(self) -> None:
        self.next_seq = 0
        self._ids: dict[int, str] = {}
        self._waiting: dict[int, Run] = {}
        self._task: asyncio.Task[None] | None = None
        self.closed = False

    def known(self, seq_id: int) -> str | None:
        """The future of a call already submitted with `seq_id`, if any."""
        return self._ids.get(seq_id)

    def submit(self, seq_id: int, request_id: str, run: Run) -> None:
        self._ids[seq_id] = request_id
        self._waiting[seq_id] = run
        self._drain_soon()

    def refused(self, seq_id: int) -> None:
        """A call refused at the request still took its seq_id (the SDK has numbered the
        next call after it): the queue passes over it instead of waiting for it for ever.
        A retry of it is checked, and refused, again."""
        if seq_id >= self.next_seq and seq_id not in self._waiting:
            self._waiting[seq_id] = _nothing
            self._drain_soon()

    def _drain_soon(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain(), name="training-client-calls")

    @property
    def blocked_on(self) -> int | None:
        """The seq_id the queue waits for while later calls are queued, else None."""
        return self.next_seq if self._waiting and self.next_seq not in self._waiting else None

    async def _drain(self) -> None:
        while not self.closed and self.next_seq in self._waiting:
            run = self._waiting.pop(self.next_seq)
            self.next_seq += 1
            await run()  # `run` resolves its own future, failures included

    def waiting_ids(self) -> list[str]:
        return [self._ids[seq] for seq in sorted(self._waiting)]

    async def close(self) -> None:
        self.closed = True
        if self._task is not None:
            await cancel_and_wait(self._task)
