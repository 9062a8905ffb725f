"""A real sandbox replica (the local backend, as a process) for the lease and reaper tests:
start it, ask its health and metrics, kill it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from waiting import wait_for

from artfleet.runtime.service import free_port
from artfleet_sandbox.local_backend.stale import OWNER_FILE

TOKEN = "owner-lease-token"


@dataclass
class Replica:
    root: Path
    logs: Path
    port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Replica:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ARTFLEET_")}
        env.update(
            ARTFLEET_API_TOKEN=TOKEN,
            ARTFLEET_PORT=str(self.port),
            ARTFLEET_METRICS_PORT=str(self.metrics_port),
            ARTFLEET_SANDBOX_BACKEND="local",
            ARTFLEET_WORKSPACE_ROOT=str(self.root),
            ARTFLEET_CACHE_DIR=str(self.root.parent / "cache"),
            ARTFLEET_TEST_RUNTIME="false",
            ARTFLEET_USE_BWRAP="never",
            ARTFLEET_SANDBOX_ALLOW_UNISOLATED="true",
        )
        log = (self.logs / f"sandbox-{self.port}.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "artfleet_sandbox"], env=env, stdout=log, stderr=log
        )
        wait_for(f"sandbox replica on :{self.port} serving", self.serving, 120)
        return self

    def serving(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, "the replica exited"
        with grpc.insecure_channel(self.target) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(), timeout=2
                )
            except grpc.RpcError:
                return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def own_dir(self) -> Path:
        assert self.proc is not None
        found = [
            p.parent
            for p in self.root.glob(f"artfleet-sandbox-*/{OWNER_FILE}")
            if f'"pid": {self.proc.pid},' in p.read_text()
        ]
        assert len(found) == 1, found
        return found[0]

    def metric(self, sample: str) -> float:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith(sample + " "):
                    return float(line.split()[-1])
        return 0.0

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(60)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[Replica]]:
    made: list[Replica] = []
    (tmp_path / "logs").mkdir()
    yield made
    for replica in made:
        replica.stop(signal.SIGKILL)
