"""Server-Sent Events of a job's progress (Trainer.WatchJob), resumable with Last-Event-ID.

The event id is the trainer's event `seq`: a client that reconnects with `Last-Event-ID: n`
gets the events from n+1 on, replayed from Redis by the trainer, then followed live."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator

import grpc

from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_api.errors import ApiError
from artfleet_api.mapping import event_out

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
    trainer: trainer_pb2_grpc.TrainerStub, job_id: str, from_seq: int
) -> AsyncIterator[bytes]:
    """The SSE body. A pump task reads the gRPC stream, so waiting for keep-alives never
    cancels a read (which would cancel the call)."""
    call = trainer.WatchJob(trainer_pb2.WatchJobRequest(job_id=job_id, from_seq=from_seq))
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in call:
                await queue.put(event)
        except grpc.aio.AioRpcError as exc:
            await queue.put(exc)
        finally:
            await queue.put(_END)

    task = asyncio.create_task(pump())
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
        call.cancel()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
