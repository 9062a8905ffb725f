"""Server-Sent Events of a job's progress (Trainer.WatchJob), resumable with Last-Event-ID.

The event id is the trainer's event `seq`: a client that reconnects with `Last-Event-ID: n`
gets the events from n+1 on, replayed from Redis by the trainer, then followed live."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable

import grpc

from artfleet.runtime.rpc import reconnect
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_api.errors import ApiError
from artfleet_api.mapping import event_out

log = logging.getLogger(__name__)
KEEPALIVE_S = 15.0  # a comment line now and then keeps proxies from closing a quiet stream
_END = object()


def resume_from(last_event_id: str | None) -> int:
    """The first seq to send: after the last one the client saw."""
    if last_event_id is None or last_event_id == "":
        return 0
    try:
        seen = int(last_event_id)
    except ValueError:
        raise ApiError(422, "must be an integer event id", "Last-Event-ID") from None
    if seen < 0 or seen > 2**62:
        raise ApiError(422, "must be between 0 and 2^62", "Last-Event-ID")
    return seen + 1


def format_event(seq: int, kind: str, data: str) -> bytes:
    return f"id: {seq}\nevent: {kind}\ndata: {data}\n\n".encode()


async def job_events(
    trainer: trainer_pb2_grpc.TrainerStub,
    job_id: str,
    from_seq: int,
    attempts: int = reconnect.ATTEMPTS,
    pause_s: Callable[[int], float] = reconnect.pause_s,
) -> AsyncIterator[bytes]:
    """The SSE body. A pump task reads the gRPC stream, so waiting for keep-alives never
    cancels a read (which would cancel the call); it reopens a stream that broke
    transiently from the event after the last one sent (`artfleet.runtime.rpc.reconnect`)."""
    queue: asyncio.Queue[object] = asyncio.Queue()
    task = asyncio.create_task(_pump(trainer, job_id, from_seq, (attempts, pause_s), queue))
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if item is _END:
                return
            if isinstance(item, grpc.aio.AioRpcError):
                error = {"error": f"{item.code().name}: {item.details()}"}
                yield f"event: error\ndata: {json.dumps(error)}\n\n".encode()
                return
            out = event_out(item)  # type: ignore[arg-type]
            yield format_event(out.seq, out.kind, out.model_dump_json())
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _pump(
    trainer: trainer_pb2_grpc.TrainerStub,
    job_id: str,
    next_seq: int,
    retry: tuple[int, Callable[[int], float]],
    queue: asyncio.Queue[object],
) -> None:
    attempts, pause_s = retry
    failures = 0
    try:
        while True:
            call = trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job_id, from_seq=next_seq))
            try:
                async for event in call:
                    failures = 0
                    next_seq = event.seq + 1
                    await queue.put(event)
                return
            except grpc.aio.AioRpcError as exc:
                if failures >= attempts or not reconnect.transient(exc.code(), exc.details()):
                    await queue.put(exc)
                    return
                failures += 1
                log.info("job %s: watch stream broke (%s); reopening", job_id, exc.code().name)
            finally:
                call.cancel()
            await asyncio.sleep(pause_s(failures))
    finally:
        await queue.put(_END)
