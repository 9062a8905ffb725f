"""The rollout process: a Celery worker on the `rollout` queue (main thread) and the
Rollout gRPC API (its own thread and event loop)."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading

from artfleet.queue import ROLLOUT_QUEUE
from artfleet.rpc.server import GrpcServer
from artfleet.v1 import rollout_pb2_grpc
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.servicer import RolloutServicer
from artfleet_rollout.settings import RolloutSettings
from artfleet_rollout.worker import create_worker_app

log = logging.getLogger(__name__)


class RolloutProcess:
    def __init__(self, settings: RolloutSettings) -> None:
        self.settings = settings
        servicer = RolloutServicer(GroupRunner(settings))
        self.server = GrpcServer(
            settings,
            "rollout",
            [lambda server: rollout_pb2_grpc.add_RolloutServicer_to_server(servicer, server)],
            ["artfleet.v1.Rollout"],
        )
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve_grpc, name="rollout-grpc", daemon=True)

    def _serve_grpc(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._grpc_main())

    async def _grpc_main(self) -> None:
        await self.server.start()
        await self.server.set_serving(True)
        self._started.set()
        await self._stop.wait()
        await self.server.stop(self.settings.shutdown_grace_s)

    def run(self) -> None:
        self._thread.start()
        if not self._started.wait(timeout=60):
            raise RuntimeError("the rollout gRPC server did not start")
        try:
            if self.settings.celery_worker:
                self._run_celery()
            else:
                self._wait_for_signal()
        finally:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(self.settings.shutdown_grace_s + 5)

    def _run_celery(self) -> None:
        app = create_worker_app(self.settings)
        replica = self.settings.replica_id or socket.gethostname()
        # threads pool: `groups_concurrency` groups at once, each on its own event loop
        # (episodes wait on the model and the sandbox), so the trainer's server batches the
        # generations of several groups. prefetch 1 per thread; SIGTERM = warm shutdown.
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

    @staticmethod
    def _wait_for_signal() -> None:
        done = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: done.set())
        done.wait()
