"""Dynamic batching: concurrent chat requests share one running batch.

Rollout workers run many episodes at once. A request that arrives while the model is
idle waits a short window for others, so they are prefilled together; a request that
arrives while a batch runs joins it at the next slice boundary. The model work runs on
the backend's torch thread, in slices of at most `max_steps_per_slice` tokens, so the event loop
(HTTP server, job runner) stays responsive. A slice ends early when a request completes
(its agent can go on at once) or when new requests wait. Every slice holds the
model gate, so training and generation never touch the model at the same time; the gate
is the backend's TurnGate (FIFO among equals), so a waiting training step runs after the
current slice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from artfleet_trainer.torch_backend.worker import TorchWorker

from .generation import BatchEngine, GenerationRequest, SequenceOutput
from .metrics import BATCH_SIZE

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Job:
    request: GenerationRequest
    future: asyncio.Future[list[SequenceOutput]]


def _too_long(request: GenerationRequest, engine: BatchEngine) -> str:
    return f"prompt has {len(request.prompt_ids)} tokens; the context holds {engine.max_context}"


class SchedulerClosed(RuntimeError):
    """The scheduler was closed while a request waited."""


class GenerationScheduler:
    def __init__(
        self,
        engine: BatchEngine,
        gate: AbstractAsyncContextManager[Any],
        worker: TorchWorker,
        *,
        max_batch_rows: int = 32,
        batch_window_s: float = 0.03,
        max_steps_per_slice: int = 16,
    ) -> None:
        self.engine = engine
        self._gate = gate
        self._worker = worker
        self.max_batch_rows = max_batch_rows
        self.batch_window_s = batch_window_s
        self.max_steps_per_slice = max_steps_per_slice
        self._pending: deque[_Job] = deque()
        self._inflight: dict[int, _Job] = {}
        self._wakeup: asyncio.Event | None = None
        self._new_work = threading.Event()  # read by the worker thread
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def generate(self, request: GenerationRequest) -> list[SequenceOutput]:
        """Generate `request.params.n` choices for `request`, batched with the others."""
        if self._closed:
            raise SchedulerClosed("the inference server is shutting down")
        wakeup = self._ensure_started()
        job = _Job(request, asyncio.get_running_loop().create_future())
        self._pending.append(job)
        self._new_work.set()
        wakeup.set()
        try:
            return await job.future
        except asyncio.CancelledError:
            # The client went away: its rows stop at the next step.
            request.cancelled = True
            with contextlib.suppress(ValueError):
                self._pending.remove(job)
            raise

    def _ensure_started(self) -> asyncio.Event:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(self._wakeup), name="torch-generation")
        return self._wakeup

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail_running(SchedulerClosed("the inference server is shutting down"))
        self._fail(SchedulerClosed("the inference server is shutting down"), list(self._pending))
        self._pending.clear()
        self.engine.reset()

    async def _run(self, wakeup: asyncio.Event) -> None:
        while not self._closed:
            if not self._pending and self.engine.num_rows == 0:
                wakeup.clear()
                await wakeup.wait()
                continue
            if self.engine.num_rows == 0:
                # Idle model: give concurrent requests a moment to arrive together.
                await asyncio.sleep(self.batch_window_s)
            jobs = self._take_admissible()
            for job in jobs:
                self._inflight[id(job.request)] = job
            try:
                async with self._gate:
                    requests = [job.request for job in jobs]
                    completed = await self._worker.run(self._slice, requests)
            except Exception as exc:  # a broken batch must not kill the server
                log.exception("generation failed; failing the requests of this batch")
                self._fail_running(exc)
                self.engine.reset()
                continue
            self._deliver(completed)

    def _take_admissible(self) -> list[_Job]:
        """Pending jobs that fit in the batch now (always one, if the model is idle)."""
        if self.engine.num_rows and (not self.engine.can_join() or self.engine.drain):
            return []  # (while draining, rows of the old policy finish first)
        rows, taken = self.engine.num_rows, []
        while self._pending:
            job = self._pending[0]
            n = job.request.params.n
            if rows and rows + n > self.max_batch_rows:
                break
            self._pending.popleft()
            if job.request.cancelled or job.future.done():
                continue
            if len(job.request.prompt_ids) >= self.engine.max_context:
                # Refused here, alone: an error inside the batch would fail all its rows.
                job.future.set_exception(ValueError(_too_long(job.request, self.engine)))
                continue
            taken.append(job)
            rows += n
        return taken

    def _slice(self, requests: list[GenerationRequest]) -> list[GenerationRequest]:
        """Torch thread: admit `requests`, then step until something completes."""
        self._new_work.clear()
        self.engine.admit(requests)
        BATCH_SIZE.observe(self.engine.num_rows)
        completed: list[GenerationRequest] = []
        for _ in range(self.max_steps_per_slice):
            completed += self.engine.step()
            if completed or self.engine.num_rows == 0:
                break
            if self._new_work.is_set() and self.engine.num_rows < self.max_batch_rows:
                break
        return completed

    def _deliver(self, completed: list[GenerationRequest]) -> None:
        for request in completed:
            job = self._inflight.pop(id(request), None)
            if job is not None and not job.future.done():
                job.future.set_result(request.outputs)

    def _fail_running(self, exc: BaseException) -> None:
        """Fail the admitted requests (their rows are lost); waiting ones stay queued."""
        self._fail(exc, list(self._inflight.values()))
        self._inflight.clear()

    @staticmethod
    def _fail(exc: BaseException, jobs: list[_Job]) -> None:
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(exc)
