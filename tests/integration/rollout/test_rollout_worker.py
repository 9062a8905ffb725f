"""The rollout worker: one event loop per process runs every group, Celery task threads
only hand tasks over; publishing follows the step-batch contract (real redis-server)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis.asyncio as aioredis

from artfleet.contracts import batches
from artfleet.contracts.batches import Published, StepBatches
from artfleet.runtime.logs import request_id
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_rollout.app import LoopThread
from artfleet_rollout.failures import short_path
from artfleet_rollout.worker import GroupWorker

pytestmark = pytest.mark.integration


def _task(group: str, job_id: str = "job") -> rollout_pb2.GroupTask:
    return rollout_pb2.GroupTask(job_id=job_id, step=1, group_id=group)


def _scored() -> rollout_pb2.RunGroupResponse:
    return rollout_pb2.RunGroupResponse(
        group=pb.TrajectoryGroup(trajectories=[pb.Trajectory(reward=1.0)])
    )


class FakeRunner:
    """Records the loop each group ran on; fails groups named in `failing`."""

    def __init__(self, failing: frozenset[str] = frozenset(), together: int = 1) -> None:
        self.failing = failing
        self.loops: list[asyncio.AbstractEventLoop] = []
        self.calls: list[str] = []
        self._together = together
        self._all_started: asyncio.Event | None = None

    async def run(self, task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        self.loops.append(asyncio.get_running_loop())
        self.calls.append(task.group_id)
        if self._all_started is None:
            self._all_started = asyncio.Event()
        if len(self.calls) >= self._together:
            self._all_started.set()
        # Groups overlap on the one loop: each waits until all of them have started.
        await asyncio.wait_for(self._all_started.wait(), 30)
        if task.group_id in self.failing:
            raise RuntimeError(f"{task.group_id} broke")
        return _scored()


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[StepBatches]:
    client = aioredis.from_url(redis_url)
    yield StepBatches(client)
    await client.aclose()


async def test_a_redelivered_task_of_a_scored_group_does_not_run(store: StepBatches) -> None:
    job = uuid.uuid4().hex
    runner = FakeRunner()
    worker = GroupWorker(runner, store)
    assert await worker.handle(_task("g0", job)) is Published.STORED
    assert await worker.handle(_task("g0", job)) is None
    assert runner.calls == ["g0"]


async def test_a_failed_run_is_published_and_never_replaces_a_scored_group(
    store: StepBatches,
) -> None:
    job = uuid.uuid4().hex
    worker = GroupWorker(FakeRunner(failing=frozenset({"g0"})), store)
    assert await worker.handle(_task("g0", job)) is Published.STORED
    [entry] = await store.read(job, 1, ["g0"])
    assert entry.state == batches.FAILED and "g0 broke" in entry.group.exceptions[0].message
    await store.publish(job, 1, "g1", _scored())
    # A second worker that fails the same group later changes nothing.
    assert (
        await GroupWorker(FakeRunner(failing=frozenset({"g1"})), store).handle(_task("g1", job))
        is None
    )
    assert await store.publish(job, 1, "g1", rollout_pb2.RunGroupResponse()) is Published.KEPT


def test_task_threads_share_one_loop_and_groups_overlap(redis_url: str) -> None:
    loop = LoopThread("test-rollout-loop")
    loop.start()
    job = uuid.uuid4().hex
    runner = FakeRunner(together=3)
    try:
        client = loop.call(_make_client(redis_url), timeout=30)
        worker = GroupWorker(runner, StepBatches(client))
        # What Celery's threads pool does: each task thread submits and waits.
        with ThreadPoolExecutor(3) as pool:
            results = list(
                pool.map(lambda g: loop.call(worker.handle(_task(g, job)), 60), ["a", "b", "c"])
            )
        assert results == [Published.STORED] * 3
        assert set(runner.loops) == {loop.loop}
        loop.call(client.aclose(), timeout=30)
    finally:
        loop.stop(30)


async def _make_client(url: str) -> aioredis.Redis:
    return aioredis.from_url(url)


class CountingBatches(StepBatches):
    """Counts the lease renewals that found the lease alive."""

    renewed = 0

    async def renew(self, job_id: str, step: int, group_id: str, token: str) -> bool:
        alive = await super().renew(job_id, step, group_id, token)
        self.renewed += alive
        return alive


class WaitForRenewals:
    """A group that runs until its lease was renewed `beats` times."""

    def __init__(self, batches: CountingBatches, beats: int) -> None:
        self._batches = batches
        self._beats = beats

    async def run(self, task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        deadline = asyncio.get_running_loop().time() + 60
        while self._batches.renewed < self._beats:
            assert asyncio.get_running_loop().time() < deadline, "the lease was not renewed"
            await asyncio.sleep(0.05)
        assert await self._batches.lost(task.job_id, task.step) == []
        return _scored()


async def test_a_running_group_keeps_its_lease_and_publish_releases_it(redis_url: str) -> None:
    client = aioredis.from_url(redis_url)
    try:
        job = uuid.uuid4().hex
        store = CountingBatches(client, lease_s=1.5)  # beats every 0.5 s
        worker = GroupWorker(WaitForRenewals(store, beats=3), store, "worker-a")
        assert await worker.handle(_task("g0", job)) is Published.STORED
        keys = batches.StepKeys(job, 1)
        assert not await client.exists(keys.lease("g0"))
        assert not await client.hexists(keys.claims, "g0")
    finally:
        await client.aclose()


class SwallowingBatches(StepBatches):
    """Its lease renewal swallows a cancel that lands inside it, as a redis.asyncio call
    once did (the chaos suite: the run ended and its heartbeat held the group forever)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inside = asyncio.Event()

    async def renew(self, job_id: str, step: int, group_id: str, token: str) -> bool:
        alive = await super().renew(job_id, step, group_id, token)
        if not self.inside.is_set():  # the first renewal: until a cancel, which it swallows
            self.inside.set()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(3600)
        return alive


class EndsDuringRenewal:
    def __init__(self, batches: SwallowingBatches) -> None:
        self._batches = batches

    async def run(self, task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        await asyncio.wait_for(self._batches.inside.wait(), 60)
        return _scored()


async def test_a_run_that_ends_during_a_renewal_publishes_and_gives_the_lease_up(
    redis_url: str,
) -> None:
    client = aioredis.from_url(redis_url)
    try:
        job = uuid.uuid4().hex
        store = SwallowingBatches(client, lease_s=1.5)  # beats every 0.5 s
        worker = GroupWorker(EndsDuringRenewal(store), store, "worker-a")
        handling = asyncio.create_task(worker.handle(_task("g0", job)))
        await asyncio.wait({handling}, timeout=60)  # no cancel: it may be swallowed too
        assert handling.done(), "the run ended, and its heartbeat held the group on"
        assert handling.result() is Published.STORED
        assert not await client.exists(batches.StepKeys(job, 1).lease("g0"))
    finally:
        await client.aclose()


async def test_a_group_held_by_a_live_run_is_skipped(store: StepBatches) -> None:
    job = uuid.uuid4().hex
    assert await store.claim(job, 1, "g0", "other-worker:1") is batches.Claim.CLAIMED
    runner = FakeRunner()
    assert await GroupWorker(runner, store).handle(_task("g0", job)) is None
    assert runner.calls == []


class BrokenRunner:
    """A group that cannot run: the user's code raises; records the run's request id."""

    def __init__(self) -> None:
        self.request_ids: list[str] = []

    async def run(self, task: rollout_pb2.GroupTask) -> rollout_pb2.RunGroupResponse:
        self.request_ids.append(request_id.get())
        _load_scenario(task.scenario_id)
        raise AssertionError("unreachable")


def _load_scenario(scenario_id: str) -> None:
    raise KeyError(scenario_id)


def _line_of(function: Any, text: str) -> int:
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


async def test_a_group_that_cannot_run_is_stored_with_the_users_frames_and_the_runs_request_id(
    store: StepBatches, caplog: pytest.LogCaptureFixture
) -> None:
    job, runner = uuid.uuid4().hex, BrokenRunner()
    task = rollout_pb2.GroupTask(job_id=job, step=1, group_id="g0", scenario_id="s9", rollouts=4)
    with caplog.at_level(logging.WARNING, logger="artfleet_rollout.failures"):
        assert await GroupWorker(runner, store).handle(task) is Published.STORED
    [entry] = await store.read(job, 1, ["g0"])
    [failure] = entry.group.exceptions
    assert (failure.type, failure.message, failure.episodes) == ("KeyError", "'s9'", 4)
    here = short_path(__file__)  # this module is the "user's code" here
    assert list(failure.frames) == [
        f"{here}:{_line_of(BrokenRunner.run, '_load_scenario(')} in run",
        f"{here}:{_line_of(_load_scenario, 'raise')} in _load_scenario",
    ]
    # One id per run: the runner's log lines carry it, and the stored failure names it.
    [run_id] = runner.request_ids
    assert run_id != "-" and failure.request_id == run_id
    [line] = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert line.startswith(f"group of job {job} step 1 group g0 failed: KeyError: 's9' at ")
