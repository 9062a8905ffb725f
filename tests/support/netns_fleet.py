"""The chaos fleet spread over four hosts (network namespaces, `netns_hosts`): Redis on
one; the trainer (its built-in torch inference server) and reward on another; two worker
hosts, each with a rollout worker and a sandbox replica (local backend). Every process
listens on its own host's address only (`ARTFLEET_HOST`: gRPC, /metrics, the inference
server, redis-server's `--bind`), and the workers and the trainer dial the sandbox by one
name, `sandbox`, which each host's /etc/hosts resolves to both worker hosts (as a DNS
name with one A record per replica does), on the one port both replicas share.

The test driver (this process) sits on the same subnet (`NetnsHosts.gateway`), so the
`ChaosFleet` handles, scrapes and chaos driver work unchanged.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field

from chaos_fleet import ROLLOUTS, SANDBOXES, ChaosFleet, Metrics
from netns_hosts import NetnsHosts

from artfleet_cli.fleet import LocalFleet

HOSTS = ("redis", "trainer", "worker1", "worker2")
SANDBOX_NAME = "sandbox"
# Which host runs each process (the un-numbered names are what `service_env` targets).
PLACEMENT = {
    "redis": "redis",
    "trainer": "trainer",
    "inference": "trainer",
    "reward": "trainer",
    ROLLOUTS[0]: "worker1",
    SANDBOXES[0]: "worker1",
    ROLLOUTS[1]: "worker2",
    SANDBOXES[1]: "worker2",
    "rollout": "worker1",
    "sandbox": "worker1",
}
WORKER_HOSTS = {"worker1": (ROLLOUTS[0], SANDBOXES[0]), "worker2": (ROLLOUTS[1], SANDBOXES[1])}


@dataclass
class NetnsFleet(ChaosFleet):
    """`ChaosFleet` on `NetnsHosts`: `start()` makes the hosts first, `stop()` deletes
    them last; `net_leftovers` is what of them outlived `stop()`."""

    hosts: NetnsHosts = field(default_factory=lambda: NetnsHosts(HOSTS))
    net_leftovers: list[str] = field(default_factory=list)

    def start(self, timeout_s: float = 600.0) -> None:
        try:
            self.hosts.start({SANDBOX_NAME: list(WORKER_HOSTS)})
        except BaseException:
            self.net_leftovers = self.hosts.stop()
            raise
        super().start(timeout_s)  # stops everything (hosts too) if it fails

    def stop(self, grace_s: float = 30.0) -> dict[str, int | None]:
        try:
            return super().stop(grace_s)
        finally:
            self.net_leftovers = self.hosts.stop()

    def address_of(self, name: str) -> str:
        return self.hosts.address(PLACEMENT[name])

    def cut_off(self, name: str) -> bool:
        return PLACEMENT[name] in self.hosts.down

    def scrape(self, name: str) -> Metrics:
        # A cut-off host answers nothing: not waiting for the connect to time out.
        return {} if self.cut_off(name) else super().scrape(name)

    def serving(self, name: str) -> bool:
        return not self.cut_off(name) and super().serving(name)

    def _assign_ports(self) -> None:
        super()._assign_ports()
        # One name, one port: each replica listens on it on its own host.
        self.ports[SANDBOXES[1]] = self.ports[SANDBOXES[0]]

    def sandbox_target(self) -> str:
        return f"{SANDBOX_NAME}:{self.ports[SANDBOXES[0]]}"

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], grpc_port: int = 0) -> None:
        # The spec keeps the bare command: `respawn` starts it on the same host again.
        self.specs[name] = (cmd, env, grpc_port)
        prefixed = [*self.hosts.exec_prefix(PLACEMENT[name]), *cmd]
        LocalFleet._spawn(self, name, prefixed, env, grpc_port)

    def listening(self, name: str) -> list[str]:
        """The TCP addresses process `name` listens on (`ss` in its host's namespace)."""
        pid = str(self.pid(name))
        out = subprocess.run(
            [*self.hosts.exec_prefix(PLACEMENT[name]), "ss", "-Htlnp"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        # gRPC listens on an IPv6 socket: an IPv4 address shows as [::ffff:a.b.c.d]:port.
        return [
            line.split()[3].replace("[::ffff:", "").replace("]:", ":")
            for line in out.splitlines()
            if f"pid={pid}," in line
        ]
