"""Groups survive their worker: a real Celery rollout worker process is SIGKILLed while it
runs a group (or SIGTERMed: past its shutdown grace it gives the group back), and the
trainer (the real JobRunner, GroupDispatcher and StepBatches) sees the lease gone and
dispatches the group again; another real worker process runs it, and the
step completes long before its gather deadline with every group counted once.

The workers (tests/support/blocking_rollout_worker.py) are our worker code around a test
GroupRunner whose groups block until the test releases them; Celery and Redis are real."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY
from repo_paths import SUPPORT
from runner_harness import events_until_done, runner_settings
from trainer_fakes import FakeBackend

from artfleet.contracts.batches import StepBatches
from artfleet.contracts.queue import make_celery
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.clients.rollouts import GroupDispatcher
from artfleet_trainer.jobs.runner import JobRunner
from artfleet_trainer.jobs.store import JobStore

pytestmark = pytest.mark.integration

LEASE_S = 3.0  # the workers' group lease (production: 30 s)
WAKE_S = 1.0  # the trainer's longest wait between lease checks (production: 5 s)
MARGIN_S = 45.0  # worker pick-up on a loaded CI machine; far below the gather deadline
GATHER_TIMEOUT_S = 900.0  # the deadline the recovery must not depend on
HELPER = SUPPORT / "blocking_rollout_worker.py"


class Scenarios:
    async def scenario_ids(self, environment: str, split: str) -> list[str]:
        return ["s1", "s2"]


@pytest.fixture
def url(redis_url: str) -> str:
    return redis_url.rsplit("/", 1)[0] + "/7"  # a database of its own: the Celery queue


@pytest.fixture
async def client(url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(url)
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


Workers = Callable[[float, float], dict[str, subprocess.Popen[bytes]]]


@pytest.fixture
def start_workers(url: str, tmp_path: Path) -> Iterator[Workers]:
    """`start_workers(lease_s, shutdown_grace_s)`: two worker processes, stopped after."""
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(lease_s: float, grace_s: float) -> dict[str, subprocess.Popen[bytes]]:
        for name in ("worker-a", "worker-b"):
            log = (tmp_path / f"{name}.log").open("wb")
            procs[name] = subprocess.Popen(
                [sys.executable, str(HELPER), url, name, str(lease_s), str(grace_s)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return procs

    try:
        yield start
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for name in procs:
            print(f"--- {name} log (tail)")
            print((tmp_path / f"{name}.log").read_text(errors="replace")[-3000:])


async def _until(what: str, check: Callable[[], Awaitable[Any]], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)


async def _rows(client: aioredis.Redis, key: str) -> list[list[str]]:
    raw = await client.lrange(key, 0, -1)
    return [(r.decode() if isinstance(r, bytes) else r).split() for r in raw]


async def _started(client: aioredis.Redis) -> list[tuple[str, str, float]]:
    return [(name, group, float(at)) for name, group, at in await _rows(client, "test:started")]


def _requeued_total() -> float:
    return REGISTRY.get_sample_value("artfleet_trainer_groups_requeued_total") or 0.0


async def test_a_killed_workers_group_runs_again_on_a_live_worker_once(
    url: str, client: aioredis.Redis, start_workers: Workers
) -> None:
    # SIGKILL: no ack, no publish, no goodbye; the trainer sees the lease run out.
    await _stop_mid_group(url, client, start_workers(LEASE_S, 10.0), signal.SIGKILL, LEASE_S)


async def test_a_stopping_worker_gives_its_groups_back_after_the_grace(
    url: str, client: aioredis.Redis, start_workers: Workers
) -> None:
    # SIGTERM: Celery's warm shutdown would wait for the blocked groups forever; after the
    # grace they are abandoned and their leases given back, so they run again long before a
    # lease (here 10 minutes) could have run out, and the worker exits by itself.
    grace_s = 1.0
    workers = start_workers(600.0, grace_s)
    await _stop_mid_group(url, client, workers, signal.SIGTERM, grace_s)


async def _stop_mid_group(
    url: str,
    client: aioredis.Redis,
    workers: dict[str, subprocess.Popen[bytes]],
    sig: signal.Signals,
    expected_s: float,
) -> None:
    """Stops the worker running the first group with `sig`; its groups must run again on
    the other worker within `expected_s` plus a wake and the margin, each stored once."""
    for name, proc in workers.items():
        await _until(f"{name} ready", partial(client.exists, f"test:ready:{name}"))
        assert proc.poll() is None
    store = JobStore(client)
    backend = FakeBackend()
    batches = StepBatches(client, wake_s=WAKE_S)
    settings = runner_settings("lease-test-token")
    dispatcher = GroupDispatcher(make_celery(url))
    runner = JobRunner(settings, store, backend, dispatcher, Scenarios(), batches)
    spec = JobSpecModel.model_validate(
        dict(steps=1, groups_per_step=2, rollouts_per_group=2, gather_timeout_s=GATHER_TIMEOUT_S)
    )
    requeued_before = _requeued_total()
    job = await store.create(spec_to_proto(spec))
    runner.start()
    try:
        # Both groups run (each worker has two task threads; either may hold both).
        await _until("both groups running", _both_started(client), 120)
        first = await _started(client)
        victim = first[0][0]
        survivor = next(n for n in workers if n != victim)
        held = sorted(group for name, group, _ in first if name == victim)
        workers[victim].send_signal(sig)
        stopped_at = time.time()
        await asyncio.to_thread(workers[victim].wait, 120)  # exits by itself

        async def rerun() -> bool:
            again = {g for n, g, at in await _started(client) if n == survivor and at > stopped_at}
            return set(held) <= again

        await _until(f"{held} running again on {survivor}", rerun, expected_s + MARGIN_S + 60)
        restarted_at = max(at for n, g, at in await _started(client) if n == survivor and g in held)
        recovery_s = restarted_at - stopped_at
        print(f"recovery: {recovery_s:.1f} s from {sig.name} to {held} running on {survivor}")
        assert recovery_s <= expected_s + WAKE_S + MARGIN_S

        await client.set("test:release", b"1")
        await events_until_done(store, job.id)
    finally:
        await runner.stop(10)
    done = await store.get(job.id)
    assert done.state == pb.JOB_STATE_SUCCEEDED, done.error
    assert [s.groups for s in done.steps] == [2] and backend.trained == [2]
    assert done.steps[0].rollout_seconds < GATHER_TIMEOUT_S / 3  # no deadline waited out
    assert _requeued_total() - requeued_before == len(held)
    # Every group stored exactly once, by the live worker; the stopped one published nothing.
    published = await _rows(client, "test:published")
    stored = sorted(group for name, group, outcome in published if outcome == "stored")
    assert stored == sorted({g for _, g, _ in first}), published
    assert all(name == survivor for name, _, _ in published)


def _both_started(client: aioredis.Redis) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return len({g for _, g, _ in await _started(client)}) >= 2

    return check
