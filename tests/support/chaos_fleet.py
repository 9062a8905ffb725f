"""A local fleet the chaos driver can hurt: two rollout workers, two sandbox replicas (local
backend), reward, trainer (torch backend) and a redis-server with AOF, each a process the
driver started and holds by its `Popen` handle, so it can SIGKILL exactly that process and
start it again with the same command, ports and environment (as compose restarts a
container). Nothing is ever looked up or killed by name.

The driver's own process becomes a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): a
process that outlives its killed parent (a sandbox command, a worker's child) is re-parented
to us instead of init, so `leftover_processes` finds every one of them and nothing else.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import not_
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families
from waiting import poll

from artfleet_cli.fleet import FleetProcess, LocalFleet
from artfleet_sandbox.local_backend.session_dirs import WAITING_MARKER

ROLLOUTS = ("rollout-1", "rollout-2")
SANDBOXES = ("sandbox-1", "sandbox-2")
NAMES = (*SANDBOXES, "reward", *ROLLOUTS, "trainer")
_PR_SET_CHILD_SUBREAPER = 36

Metrics = dict[str, float]


def _set_subreaper(on: bool = True) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """Whatever outlives its parent inside is found (it becomes ours), and the caller is an
    ordinary parent again after it, however it ends: a pytest left a subreaper keeps every
    later test's orphans as zombies, which look alive to any wait for their exit."""
    _set_subreaper()
    try:
        yield
    finally:
        _set_subreaper(False)


def kind_of(name: str) -> str:
    return name.split("-")[0]


def sample_key(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}" if inner else name


def parse_metrics(text: str) -> Metrics:
    return {
        sample_key(s.name, s.labels): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@dataclass
class ChaosFleet(LocalFleet):
    """`LocalFleet` with replicas, fixed ports, SIGKILL and respawn by handle."""

    group_lease_s: float = 10.0
    job_lease_s: float = 6.0
    # A killed worker's sandbox sessions are closed within this (default 60 s).
    sandbox_lease_s: float = 15.0
    deployment: str = ""
    specs: dict[str, tuple[list[str], dict[str, str], int]] = field(default_factory=dict)
    metrics_ports: dict[str, int] = field(default_factory=dict)
    # Counters of processes that were killed, scraped just before (a dead /metrics is gone).
    banked: dict[str, Metrics] = field(default_factory=dict)
    inference_port: int = 0
    # The latest counters of each live process: what is banked when one dies by itself.
    last_seen: dict[str, Metrics] = field(default_factory=dict)
    # Our children from before the fleet (a test session's own servers, e.g. a
    # session-scoped redis-server): not the fleet's, so never leftovers nor reaped.
    children_before: frozenset[int] = frozenset()

    def start(self, timeout_s: float = 600.0) -> None:
        self.children_before = frozenset(pid for pid, _ in _children(reap=False))
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        self.deployment = self.deployment or f"artfleet-chaos-{os.getpid()}"
        try:
            self._start_redis()
            self._assign_ports()
            for name in NAMES:
                self._start_service(name)
            deadline = time.monotonic() + timeout_s
            for name in NAMES:
                self._wait_serving(self.process(name), deadline)
        except BaseException:
            self.stop()
            raise

    def _assign_ports(self) -> None:
        for name in NAMES:
            self.ports[name] = self.held.pick()
            self.metrics_ports[name] = self.held.pick()
        self.ports.update(
            sandbox=self.ports[SANDBOXES[0]],
            reward=self.ports["reward"],
            rollout=self.ports[ROLLOUTS[0]],
        )
        self.inference_port = self.ports["inference"] = self.held.pick()

    def sandbox_target(self) -> str:
        """What the workers and the trainer dial: every replica, as a comma list."""
        return ",".join(self.target(s) for s in SANDBOXES)

    def workspace_root(self, name: str) -> Path:
        return self.workdir / "workspaces" / name

    def chaos_env(self, name: str) -> dict[str, str]:
        kind = kind_of(name)
        env = self.service_env(kind)
        env.update(
            ARTFLEET_HOST=self.address_of(name),
            ARTFLEET_PORT=str(self.ports[name]),
            ARTFLEET_METRICS_PORT=str(self.metrics_ports[name]),
            ARTFLEET_REPLICA_ID=name,
            ARTFLEET_DEPLOYMENT=self.deployment,
            ARTFLEET_GROUP_LEASE_S=str(self.group_lease_s),
            ARTFLEET_SANDBOX_LEASE_S=str(self.sandbox_lease_s),
            ARTFLEET_SANDBOX_TARGET=self.sandbox_target(),
        )
        if kind == "sandbox":
            root = self.workspace_root(name)
            root.mkdir(parents=True, exist_ok=True)
            env.update(ARTFLEET_SANDBOX_BACKEND="local", ARTFLEET_WORKSPACE_ROOT=str(root))
        if kind == "trainer":
            # Fixed, as in compose: workers in flight reach the restarted trainer's endpoint.
            # Every rollout replica, as a compose name resolving to each would: one worker
            # cut off or down does not stop the trainer's policy checks.
            env.update(
                ARTFLEET_ROLLOUT_TARGET=",".join(self.target(r) for r in ROLLOUTS),
                ARTFLEET_BACKEND="torch",
                ARTFLEET_INFERENCE_PORT=str(self.inference_port),
                ARTFLEET_JOB_LEASE_S=str(self.job_lease_s),
            )
        env.update(self.extra_env)
        return env

    def _start_service(self, name: str) -> None:
        cmd = [sys.executable, "-m", f"artfleet_{kind_of(name)}"]
        self._spawn(name, cmd, self.chaos_env(name), grpc_port=self.ports[name])

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], grpc_port: int = 0) -> None:
        self.specs[name] = (cmd, env, grpc_port)
        super()._spawn(name, cmd, env, grpc_port)

    # ------------------------------------------------------------ handles
    def process(self, name: str) -> FleetProcess:
        return next(p for p in self.processes if p.name == name)

    def alive(self, name: str) -> bool:
        found = [p for p in self.processes if p.name == name]
        return bool(found) and found[0].proc.poll() is None

    def pid(self, name: str) -> int:
        return self.process(name).proc.pid

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL, bank: bool = True) -> float:
        """Signals the process this fleet started as `name`; returns when it is gone."""
        if bank and kind_of(name) != "redis":
            self.bank(name)
        process = self.process(name)
        process.proc.send_signal(sig)
        process.proc.wait(60)
        self.processes.remove(process)
        return time.monotonic()

    def unread_request_bytes(self, name: str) -> int:
        """Bytes sent to `name`'s gRPC port that it has not read yet: the receive queues of
        its established connections, in its own network namespace. A frozen server's
        requests in flight wait there."""
        pid, port = self.pid(name), self.specs[name][2]
        total = 0
        for table in ("tcp", "tcp6"):
            try:
                rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for row in rows:
                fields = row.split()  # sl local remote st tx_queue:rx_queue ...
                if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    total += int(fields[4].split(":")[1], 16)
        return total

    def freeze(self, name: str) -> None:
        self.process(name).proc.send_signal(signal.SIGSTOP)

    def respawn(self, name: str) -> None:
        """Starts `name` again with its command, environment and ports (no wait)."""
        cmd, env, port = self.specs[name]
        self._spawn(name, cmd, env, port)

    def restart_redis(self) -> None:
        """A graceful restart (compose restart: SIGTERM, AOF flushed), same port and data."""
        self.kill("redis", signal.SIGTERM, bank=False)
        self.respawn("redis")
        import redis

        client = redis.Redis.from_url(self.redis_url)
        deadline = time.monotonic() + 120
        while True:
            try:
                client.ping()
                return
            except (redis.ConnectionError, redis.ResponseError):
                self._check_alive(self.process("redis"))
                if time.monotonic() > deadline:
                    raise TimeoutError("redis-server did not come back") from None
                time.sleep(0.1)

    def serving(self, name: str) -> bool:
        if not self.alive(name):
            return False
        with grpc.insecure_channel(self.target(name)) as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=2
                )
            except grpc.RpcError:
                return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    # ------------------------------------------------------------ metrics
    def scrape(self, name: str) -> Metrics:
        """`name`'s /metrics now; {} when it does not answer."""
        url = f"http://{self.address_of(name)}:{self.metrics_ports[name]}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                return parse_metrics(reply.read().decode())
        except OSError:
            return {}

    def refresh(self) -> None:
        for name in NAMES:
            if self.alive(name):
                self.last_seen[name] = self.scrape(name) or self.last_seen.get(name, {})

    def bank(self, name: str, crashed: bool = False) -> None:
        """Adds `name`'s counters to the bank: scraped now, or (it crashed) last seen."""
        banked = self.banked.setdefault(name, {})
        latest = self.last_seen.pop(name, {}) if crashed else self.scrape(name)
        self.last_seen.pop(name, None)
        for key, value in latest.items():
            if key.split("{", 1)[0].endswith("_total"):  # counters, labelled or not
                banked[key] = banked.get(key, 0.0) + value

    def counter(self, kind: str, key: str) -> float:
        """A counter summed over every process of `kind`, dead incarnations included."""
        total = 0.0
        for name in NAMES:
            if kind_of(name) == kind:
                total += self.banked.get(name, {}).get(key, 0.0)
                total += self.scrape(name).get(key, 0.0) if self.alive(name) else 0.0
        return total

    # ------------------------------------------------------------ leftovers
    def leftover_processes(self, timeout_s: float = 60.0) -> list[str]:
        """Processes re-parented to us (subreaper) that are still alive after the fleet
        stopped, waiting up to `timeout_s` for them to end; zombies are reaped."""
        left = poll(lambda: _children(exclude=self.children_before), not_, timeout_s)
        return [f"{pid} {cmd}" for pid, cmd in left]


def _children(exclude: frozenset[int] = frozenset(), reap: bool = True) -> list[tuple[int, str]]:
    """Our live children (our own and those re-parented to us) but `exclude`; zombies
    among them are reaped when `reap`."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        if int(fields.get("PPid", "0")) != me:
            continue
        pid = int(entry.name)
        if pid in exclude:
            continue
        if fields.get("State", "").startswith("Z"):
            if reap:
                _reap(pid)
            continue
        found.append((pid, cmdline.strip()))
    return found


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def leftover_workspaces(fleet: ChaosFleet) -> list[str]:
    """Backend directories (`artfleet-sandbox-*`) the sandbox replicas left behind."""
    return [
        str(p) for name in SANDBOXES for p in fleet.workspace_root(name).glob("artfleet-sandbox-*")
    ]


def wait_sessions_closed(fleet: ChaosFleet, timeout_s: float) -> int:
    """Waits up to `timeout_s` for every sandbox replica to hold no session (a killed
    worker's go within its owner lease); returns how many are left."""
    return poll(lambda: sum(session_count(fleet, name) for name in SANDBOXES), not_, timeout_s)


def session_count(fleet: ChaosFleet, name: str, since: float = 0.0) -> int:
    """Sessions open on sandbox replica `name` now (their directories; not those waiting
    in its warm pool, which no one holds), opened at or after `since` (wall clock)."""
    found = 0
    for path in fleet.workspace_root(name).glob("artfleet-sandbox-*/s-*"):
        with contextlib.suppress(OSError):
            held = not (path / WAITING_MARKER).exists()
            found += held and path.stat().st_ctime >= since
    return found


def docker_containers(deployment: str) -> list[str]:
    """Containers labelled with the deployment ([] without a Docker engine)."""
    try:
        import docker

        client = docker.from_env()
    except Exception:
        return []
    try:
        found = client.containers.list(
            all=True,
            filters={"label": f"io.artfleet.deployment={deployment}"},
            ignore_removed=True,  # one removed between the list and its inspect is gone already
        )
        for container in found:
            container.remove(force=True, v=True)
        return [str(c.name) for c in found]
    finally:
        client.close()
