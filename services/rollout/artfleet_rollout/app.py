"""The rollout process: one long-lived event loop (its own thread) runs the Rollout gRPC API
and every group; the Celery worker (main thread, threads pool) only hands group tasks to
that loop and waits for them, so channels and clients are made once per process."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import signal
import socket
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import redis.asyncio as aioredis
from celery.signals import worker_shutting_down

from artfleet.contracts.batches import StepBatches
from artfleet.contracts.queue import ROLLOUT_QUEUE
from artfleet.runtime.health import HealthMonitor
from artfleet.runtime.rpc.server import GrpcServer, GrpcServiceApp
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.installed import export_metrics, installed_plugins
from artfleet_rollout.servicer import RolloutServicer
from artfleet_rollout.settings import RolloutSettings
from artfleet_rollout.worker import GroupWorker, create_worker_app

log = logging.getLogger(__name__)
T = TypeVar("T")


class LoopThread:
    """An event loop in a daemon thread; other threads submit coroutines and wait."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> None:
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def stop(self, timeout: float) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()


def bound_warm_shutdown(loop: LoopThread, worker: GroupWorker, grace_s: float) -> None:
    """Celery's warm shutdown waits for running tasks without a bound (a group whose policy
    endpoint is gone retries for minutes). Past `grace_s` the groups still running are
    abandoned: each gives its lease back, the trainer dispatches it again at its next wake,
    and the worker exits."""

    def after_grace() -> None:
        abandoned = loop.call(worker.abandon(), timeout=60)
        if abandoned:
            log.warning("shutdown: gave back %d running group(s) after %.0fs", abandoned, grace_s)

    def on_shutdown(**_: object) -> None:
        timer = threading.Timer(grace_s, after_grace)
        timer.daemon = True
        timer.start()

    worker_shutting_down.connect(on_shutdown, weak=False)


class RolloutRuntime(GrpcServiceApp):
    """What lives on the loop: the Redis client, the group runner, the gRPC server."""

    def __init__(self, settings: RolloutSettings) -> None:
        self.settings = settings
        self._redis = aioredis.from_url(settings.redis_url)
        self.runner = GroupRunner(settings)
        batches = StepBatches(self._redis, lease_s=settings.group_lease_s)
        replica = settings.replica_id or socket.gethostname()
        self.worker = GroupWorker(self.runner, batches, f"{replica}:{os.getpid()}")
        servicer = RolloutServicer(self.runner)
        self.server = GrpcServer(
            settings,
            "rollout",
            [lambda server: rollout_pb2_grpc.add_RolloutServicer_to_server(servicer, server)],
            ["artfleet.v1.Rollout"],
        )
        # Episodes live in sandboxes; the worker itself keeps only what ARTFLEET_HEALTH_WORK_DIRS
        # names, and its child processes (local MCP servers) and /tmp.
        self.health = HealthMonitor.for_service("rollout", settings)

    async def start_parts(self) -> None:
        await self._redis.ping()  # fail fast with a clear error when Redis is not there
        export_metrics(installed_plugins())
        await self.runner.start()  # on this loop: its channels and clients belong to it

    async def stop_parts(self) -> None:
        await self.runner.stop()
        await self._redis.aclose()


class RolloutProcess:
    def __init__(self, settings: RolloutSettings) -> None:
        self.settings = settings
        self._loop = LoopThread("rollout-loop")
        self._runtime: RolloutRuntime | None = None

    def run(self) -> None:
        exitcode = 0
        self._loop.start()
        grace = self.settings.shutdown_grace_s + 5
        try:
            # Built on the loop: grpc.aio and redis.asyncio objects bind to the loop they meet.
            self._runtime = self._loop.call(self._build(), timeout=60)
            if self.settings.celery_worker:
                exitcode = self._run_celery()
            else:
                self._wait_for_signal()
        finally:
            try:
                if self._runtime is not None:
                    self._loop.call(self._runtime.stop(), timeout=grace)
            finally:
                self._loop.stop(grace)
        if exitcode:
            # Celery gave up by itself (an "Unrecoverable error", e.g. kombu's Redis transport
            # failing on reconnect while Redis restarts): exit non-zero so the orchestrator
            # restarts the worker; its groups' leases run out and the trainer re-runs them.
            raise SystemExit(exitcode)

    async def _build(self) -> RolloutRuntime:
        runtime = RolloutRuntime(self.settings)
        await runtime.start()
        return runtime

    def run_group(self, task: rollout_pb2.GroupTask) -> None:
        """A Celery task thread: run the group on the loop and wait until it is published."""
        assert self._runtime is not None
        try:
            self._loop.call(self._runtime.worker.handle(task))
        except concurrent.futures.CancelledError:
            # Abandoned at shutdown (bound_warm_shutdown): the group was given back and the
            # trainer runs it elsewhere. The task ends normally, so Celery acks it.
            log.info("group %s given back at shutdown", task.group_id)

    def _run_celery(self) -> int:
        assert self._runtime is not None
        bound_warm_shutdown(self._loop, self._runtime.worker, self.settings.shutdown_grace_s)
        app = create_worker_app(self.settings.redis_url, self.run_group)
        replica = self.settings.replica_id or socket.gethostname()
        # threads pool: `groups_concurrency` task threads, each waiting on one group while
        # the groups share the loop (episodes wait on the model and the sandbox), so the
        # trainer's server batches the generations of several groups. prefetch 1 per
        # thread; SIGTERM = warm shutdown (running groups finish and publish first, for up to
        # the shutdown grace; see bound_warm_shutdown).
        worker = app.Worker(
            hostname=f"rollout@{replica}",
            queues=[ROLLOUT_QUEUE],
            pool="threads",
            concurrency=self.settings.groups_concurrency,
            loglevel=self.settings.log_level,
            without_mingle=True,
            without_gossip=True,
        )
        worker.start()
        return int(worker.exitcode or 0)

    @staticmethod
    def _wait_for_signal() -> None:
        done = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: done.set())
        done.wait()
