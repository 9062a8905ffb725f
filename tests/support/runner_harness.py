"""Running the real JobRunner in a test: settings that point nowhere outside the test,
and following a job's event stream until it ends."""

from __future__ import annotations

from typing import Any

from pydantic import SecretStr

from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs.runner import JobRunner
from artfleet_trainer.jobs.store import TERMINAL, JobStore
from artfleet_trainer.settings import TrainerSettings

STOP_TIMEOUT_S = 10


def runner_settings(token: str, **fields: Any) -> TrainerSettings:
    """Trainer settings for a runner under test: no inference server, fast polling."""
    base: dict[str, Any] = {
        "inference_public_url": "http://127.0.0.1:1/v1",
        "poll_interval_s": 0.05,
    }
    return TrainerSettings(api_token=SecretStr(token), **{**base, **fields})


async def events_until_done(
    store: JobStore, job_id: str, from_seq: int = 0
) -> list[pb.ProgressEvent]:
    """The job's events from `from_seq` (a resumed job's: after its resume) up to and
    including the one that names a terminal state."""
    events = []
    async for event in store.events(job_id, from_seq, block_ms=200):
        events.append(event)
        if event.kind == pb.EVENT_KIND_STATE and event.state in TERMINAL:
            break
    return events


async def run_to_end(
    runner: JobRunner, store: JobStore, job_id: str, from_seq: int = 0
) -> tuple[pb.Job, list[pb.ProgressEvent]]:
    """Starts `runner`, follows the job until it ends, stops the runner; the job as stored
    and its events (from `from_seq`)."""
    runner.start()
    try:
        events = await events_until_done(store, job_id, from_seq)
    finally:
        await runner.stop(STOP_TIMEOUT_S)
    return await store.get(job_id), events
