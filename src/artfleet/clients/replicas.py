"""Replicas behind one name, and the choice of one per call.

`docker compose up --scale X=N` gives the service name one DNS A record per replica, and a
Kubernetes headless service does the same with its pods; a comma list names replicas
outright. Three clients spread over replicas this way: the sandbox router (sessions,
`artfleet.clients.sandbox`), the rollout workers' policy calls (`artfleet_rollout.
policy_routing`) and the trainer's rollout client. What they share is here: resolving a
target (`host:port` or base URLs) to its replicas, re-resolved every few seconds, and
`ReplicaChoice`, which picks a replica: the one a key (an episode) is pinned to while it is
healthy, else the least loaded (in-flight calls), with failed replicas avoided for a while.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

Clock = Callable[[], float]


def split_target(target: str) -> list[tuple[str, int]]:
    """`host:port[,host:port...]` → [(host, port)], with `[v6]:port` understood."""
    pairs = []
    for part in filter(None, (p.strip() for p in target.split(","))):
        host, sep, port = part.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"target {part!r} is not host:port")
        pairs.append((host.strip("[]"), int(port)))
    if not pairs:
        raise ValueError("target is empty")
    return pairs


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def _host_addresses(host: str, port: int) -> list[str]:
    """The IP addresses `host` resolves to (TCP), in resolver order; [] when it does not."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=0, proto=6)  # TCP
    except OSError as exc:
        log.warning("cannot resolve host %s: %s", host, exc)
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def resolve_replicas(target: str) -> list[str]:
    """Every address the target's names resolve to, in a stable order."""
    found: dict[str, None] = {}
    for host, port in split_target(target):
        if _is_ip(host):
            found[_address(host, port)] = None
            continue
        for ip in await _host_addresses(host, port):
            found[_address(ip, port)] = None
    return sorted(found)


def split_urls(base_url: str) -> list[str]:
    """`url[,url...]` → the URLs, blanks dropped."""
    return [u.strip() for u in base_url.split(",") if u.strip()]


async def resolve_urls(base_url: str) -> list[str]:
    """Every replica a base URL (or a comma list of them) names, in a stable order: an
    `http` URL whose host resolves to several addresses becomes one URL per address (the
    port and path kept). Kept as written: IP literals, `https` URLs (a certificate names
    the host, not its addresses), a host that does not resolve (the client's own error
    says so), and one that resolves to loopback only (`localhost`: one local server)."""
    found: dict[str, None] = {}
    for url in split_urls(base_url):
        for replica in await _expand(url):
            found[replica] = None
    return sorted(found)


async def _expand(url: str) -> list[str]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "http" or not host or _is_ip(host):
        return [url]
    port = parts.port or 80
    addresses = await _host_addresses(host, port)
    if not addresses or all(ipaddress.ip_address(a).is_loopback for a in addresses):
        return [url]
    userinfo = parts.netloc.rpartition("@")[0]
    prefix = f"{userinfo}@" if userinfo else ""
    return [urlunsplit(parts._replace(netloc=f"{prefix}{_address(ip, port)}")) for ip in addresses]


class Resolved:
    """A target's replicas, resolved again when older than `refresh_s` (or marked stale
    after a failure: the replica set may have changed). An empty answer keeps the last
    known set (a resolver's hiccup is not every replica gone)."""

    def __init__(
        self,
        resolve: Callable[[], Awaitable[list[str]]],
        refresh_s: float = 10.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self._resolve = resolve
        self._refresh_s = refresh_s
        self._clock = clock
        self._replicas: list[str] = []
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    def stale(self) -> None:
        self._at = float("-inf")

    async def get(self) -> list[str]:
        if self._fresh():
            return list(self._replicas)
        async with self._lock:  # one resolution for every caller that found it old
            if not self._fresh():
                found = await self._resolve()
                if found:
                    self._replicas = found
                self._at = self._clock()
        return list(self._replicas)

    def _fresh(self) -> bool:
        return bool(self._replicas) and self._clock() - self._at <= self._refresh_s


class ReplicaChoice:
    """Which replica a call goes to. No I/O: the caller reports each call's start and end
    (`begin`, `end`) and failures (`failed`), and updates the replica set (`update`).

    - A key (an episode id) is pinned to the replica that served it: its later calls go
      there while it is in the set, not avoided and not excluded (that replica holds the
      episode's prefix in its cache). The pins are an LRU of `sticky_size` keys.
    - Otherwise: replicas not avoided first, then fewest calls in flight from here, ties
      broken by a rotation that starts at random (so many clients spread too).
    - A replica that failed is avoided for `avoid_s`: still chosen when every other one
      is excluded or avoided too (its outage may be over).
    """

    def __init__(
        self,
        replicas: Sequence[str] = (),
        *,
        avoid_s: float = 10.0,
        sticky_size: int = 10_000,
        clock: Clock = time.monotonic,
    ) -> None:
        self._replicas: list[str] = list(replicas)
        self._avoid_s = avoid_s
        self._sticky_size = sticky_size
        self._clock = clock
        self._in_flight: dict[str, int] = {}
        self._avoid_until: dict[str, float] = {}
        self._pins: OrderedDict[str, str] = OrderedDict()
        self._rotation = random.randrange(1 << 16)

    @property
    def replicas(self) -> list[str]:
        return list(self._replicas)

    def update(self, replicas: Sequence[str]) -> None:
        self._replicas = list(replicas)

    def in_flight(self, replica: str) -> int:
        return self._in_flight.get(replica, 0)

    def avoided(self, replica: str) -> bool:
        return self._avoid_until.get(replica, 0.0) > self._clock()

    def order(self, exclude: Collection[str] = ()) -> list[str]:
        """Replicas to try for an unpinned call: healthy first, least loaded, rotated."""
        self._rotation += 1
        candidates = [r for r in self._replicas if r not in exclude]
        n = len(self._replicas) or 1

        def key(replica: str) -> tuple[bool, int, int]:
            index = self._replicas.index(replica)
            return self.avoided(replica), self.in_flight(replica), (index - self._rotation) % n

        return sorted(candidates, key=key)

    def pick(self, key: str = "", exclude: Collection[str] = ()) -> str | None:
        """The replica for the next call of `key` ("" = no pin); None when every replica is
        excluded. The key is pinned to what is returned."""
        pinned = self._pins.get(key) if key else None
        if (
            pinned is not None
            and pinned in self._replicas
            and pinned not in exclude
            and not self.avoided(pinned)
        ):
            self._pins.move_to_end(key)
            return pinned
        ordered = self.order(exclude)
        if not ordered:
            return None
        if key:
            self._pins[key] = ordered[0]
            self._pins.move_to_end(key)
            while len(self._pins) > self._sticky_size:
                self._pins.popitem(last=False)
        return ordered[0]

    def pinned(self, key: str) -> str | None:
        return self._pins.get(key)

    def forget(self, key: str) -> None:
        self._pins.pop(key, None)

    def begin(self, replica: str) -> None:
        self._in_flight[replica] = self.in_flight(replica) + 1

    def end(self, replica: str) -> None:
        self._in_flight[replica] = max(0, self.in_flight(replica) - 1)

    def failed(self, replica: str) -> None:
        self._avoid_until[replica] = self._clock() + self._avoid_s

    def recovered(self, replica: str) -> None:
        self._avoid_until.pop(replica, None)
