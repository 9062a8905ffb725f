"""A local fleet (vLLM serving the policy) whose trainer spans two "nodes": network
namespaces on one bridge (`netns_hosts`), one rank each, launched as each node of a
cluster would be: the same `python -m artfleet_trainer`, the node's index and node 0's
address in its settings (torchrun's static rendezvous over the bridge).

Every other process runs in this namespace and listens on the bridge's address here
(`NetnsHosts.gateway`), so the trainer's ranks on their hosts reach Redis, vLLM, reward
and sandbox, and the rollout workers reach the trainer on node 0's address. The
checkpoint folder is on this machine's one file system, as a volume both nodes mount.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass, field

from netns_hosts import NetnsHosts

from artfleet_cli.fleet import LocalFleet
from artfleet_cli.fleet_process import FleetProcess

NODES = ("node0", "node1")
NODE1 = "trainer-node1"  # the second node's launcher (its rank follows; it serves nothing)
MASTER_PORT = 29500  # on node 0's address: its own namespace, so no clash with this host's


@dataclass
class NodesFleet(LocalFleet):
    """`LocalFleet` whose trainer is two launchers on two hosts: `start()` makes the hosts
    first, `stop()` deletes them last; `net_leftovers` is what of them outlived `stop()`."""

    hosts: NetnsHosts = field(default_factory=lambda: NetnsHosts(NODES))
    net_leftovers: list[str] = field(default_factory=list)

    def start(self, timeout_s: float = 600.0) -> None:
        try:
            self.hosts.start()
        except BaseException:
            self.net_leftovers = self.hosts.stop()
            raise
        super().start(timeout_s)  # stops everything (hosts too) if it fails

    def stop(self, grace_s: float = 30.0) -> dict[str, int | None]:
        """Node 0's launcher first (its rank 0 ends the group), then node 1's is given
        `grace_s` to end by itself, as it does once its rank has left, before the rest
        stop as a `LocalFleet`'s do."""
        try:
            running = {p.name: p for p in self.processes}
            if "trainer" in running:
                running["trainer"].terminate(grace_s)
            if NODE1 in running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    running[NODE1].proc.wait(grace_s)
            return super().stop(grace_s)
        finally:
            self.net_leftovers = self.hosts.stop()

    def address_of(self, name: str) -> str:
        if name == "trainer":
            return self.hosts.address("node0")
        return self.hosts.gateway

    def service_env(self, name: str) -> dict[str, str]:
        env = super().service_env(name)
        if name == "trainer":
            env.update(
                ARTFLEET_TRAIN_WORLD="2",
                ARTFLEET_TRAIN_NODES="2",
                ARTFLEET_TRAIN_NODE_RANK="0",
                ARTFLEET_TRAIN_MASTER_ADDR=self.hosts.address("node0"),
                ARTFLEET_TRAIN_MASTER_PORT=str(MASTER_PORT),
                GLOO_SOCKET_IFNAME="eth0",  # the host's link (its hostname is not its own)
            )
        return env

    def _start_service(self, name: str) -> None:
        super()._start_service(name)
        if name == "trainer":
            env = self.service_env("trainer")
            env.update(ARTFLEET_TRAIN_NODE_RANK="1", ARTFLEET_HOST=self.hosts.address("node1"))
            self._spawn(NODE1, [sys.executable, "-m", "artfleet_trainer"], env)

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str], grpc_port: int = 0) -> None:
        host = {"trainer": "node0", NODE1: "node1"}.get(name)
        prefixed = [*self.hosts.exec_prefix(host), *cmd] if host else cmd
        super()._spawn(name, prefixed, env, grpc_port)

    def _wait_serving(self, process: FleetProcess, deadline: float) -> None:
        if process.name == NODE1:  # it serves nothing: node 0's rank 0 serves for both
            self._check_alive(process)
            return
        super()._wait_serving(process, deadline)

    def launcher(self, name: str) -> subprocess.Popen[bytes]:
        """The process of `trainer` (node 0's launcher) or `NODE1`."""
        return next(p.proc for p in self.processes if p.name == name)
