"""Hosts on one machine: a network namespace per host, each with its own address on a
private /24, joined by a Linux bridge (iproute2 `ip netns` + veth).

The bridge lives in a switch namespace of its own: the machine's firewall (Docker's
FORWARD policy is DROP, and `br_netfilter` hands bridged frames to it) does not reach
into a fresh namespace, so hosts talk without any change to the machine's rules. One more
veth joins this process's namespace to the switch with the subnet's first address: the
test reaches every host as a client on the same network.

Everything is named with a per-run random prefix (interface names stay within 15
characters) and `stop()` deletes exactly what `start()` made, even after a partial start.
`cut(host)` sets the host's port on the switch down (the host is cut off, its processes
run on); `heal(host)` sets it up again.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

NETNS_ETC = Path("/etc/netns")  # `ip netns exec NS` bind-mounts /etc/netns/NS/* over /etc


def can_make_namespaces() -> str:
    """ "" when this process can make namespaces, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no iproute2 `ip` command"
    probe = f"afprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _free_subnet(rng: random.Random) -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no route or address of this machine overlaps."""
    used = []
    for what in (["route", "show", "table", "all"], ["addr", "show"]):
        out = subprocess.run(["ip", "-j", "-4", *what], capture_output=True, text=True).stdout
        for entry in json.loads(out or "[]"):
            for dst in [entry.get("dst", "")] + [
                f"{a['local']}/{a['prefixlen']}" for a in entry.get("addr_info", [])
            ]:
                with contextlib.suppress(ValueError):
                    used.append(ipaddress.ip_network(dst, strict=False))
    for _ in range(100):
        net = ipaddress.IPv4Network(f"10.{rng.randint(200, 250)}.{rng.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 for the test network")


@dataclass
class NetnsHosts:
    """`hosts` (short names) as namespaces on one bridged subnet; `start()`, `stop()`."""

    hosts: tuple[str, ...]
    prefix: str = field(default_factory=lambda: "af" + secrets.token_hex(3))
    subnet: ipaddress.IPv4Network | None = None
    namespaces: list[str] = field(default_factory=list)  # made by us, in order
    links: list[str] = field(default_factory=list)  # made by us in this namespace
    etc_dirs: list[Path] = field(default_factory=list)
    down: set[str] = field(default_factory=set)  # hosts cut off now

    @property
    def switch(self) -> str:
        return f"{self.prefix}-sw"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    def namespace(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def port(self, host: str) -> str:
        """The host's veth end on the switch (what `cut` sets down)."""
        return f"{self.prefix}h{self.hosts.index(host)}"

    def address(self, host: str) -> str:
        assert self.subnet is not None, "start() first"
        return str(self.subnet[10 + self.hosts.index(host)])

    @property
    def gateway(self) -> str:
        """This process's address on the subnet."""
        assert self.subnet is not None, "start() first"
        return str(self.subnet[1])

    def exec_prefix(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(host)]

    def start(self, names: dict[str, list[str]] | None = None) -> None:
        """Makes the switch, the hosts and their links; `names` (name → hosts) goes into
        every host's /etc/hosts beside the hosts' own names (a name may list several)."""
        self.subnet = self.subnet or _free_subnet(random.Random())
        try:
            self._add_namespace(self.switch)
            _ip("-n", self.switch, "link", "add", "name", self.bridge, "type", "bridge")
            _ip("-n", self.switch, "link", "set", self.bridge, "up")
            for host in self.hosts:
                self._add_host(host)
            self._join_this_namespace()
            self._write_hosts_files(names or {})
        except BaseException:
            self.stop()
            raise

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _add_host(self, host: str) -> None:
        ns, port = self.namespace(host), self.port(host)
        self._add_namespace(ns)
        # Made in the host's namespace, so a failure part-way leaves nothing outside ours.
        _ip("-n", ns, "link", "add", "name", port, "type", "veth", "peer", "name", "eth0")
        _ip("-n", ns, "link", "set", port, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", port, "master", self.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")

    def _join_this_namespace(self) -> None:
        assert self.subnet is not None
        mine, peer = f"{self.prefix}t", f"{self.prefix}tp"
        _ip("link", "add", "name", mine, "type", "veth", "peer", "name", peer)
        self.links.append(mine)
        _ip("link", "set", peer, "netns", self.switch)
        _ip("-n", self.switch, "link", "set", peer, "master", self.bridge, "up")
        _ip("addr", "add", f"{self.gateway}/24", "dev", mine)
        _ip("link", "set", mine, "up")

    def _write_hosts_files(self, names: dict[str, list[str]]) -> None:
        lines = ["127.0.0.1 localhost", f"{self.gateway} test-driver"]
        lines += [f"{self.address(h)} {h}" for h in self.hosts]
        lines += [f"{self.address(h)} {name}" for name, hosts in names.items() for h in hosts]
        for host in self.hosts:
            directory = NETNS_ETC / self.namespace(host)
            directory.mkdir(parents=True)
            self.etc_dirs.append(directory)
            (directory / "hosts").write_text("\n".join(lines) + "\n")

    def cut(self, host: str) -> None:
        _ip("-n", self.switch, "link", "set", self.port(host), "down")
        self.down.add(host)

    def heal(self, host: str) -> None:
        _ip("-n", self.switch, "link", "set", self.port(host), "up")
        self.down.discard(host)

    def stop(self) -> list[str]:
        """Deletes what `start()` made (ignoring what is gone already); returns what of it
        is still there afterwards (should be [])."""
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        # Deleting a namespace deletes its interfaces, and each veth's peer with them.
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for directory in self.etc_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        return self.leftovers()

    def leftovers(self) -> list[str]:
        """Namespaces, links and /etc/netns entries with our prefix that exist now."""
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        found = [line.split()[0] for line in netns.splitlines() if line.startswith(self.prefix)]
        found += [
            name
            for line in links.splitlines()
            if (name := line.split(":")[1].strip().split("@")[0]).startswith(self.prefix)
        ]
        found += [str(p) for p in NETNS_ETC.glob(f"{self.prefix}*")] if NETNS_ETC.is_dir() else []
        return found
