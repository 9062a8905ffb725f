"""Client side of sticky sandbox sessions: spread sessions over replicas, pin each to its own.

`docker compose up --scale sandbox=N` gives the service name one DNS A record per
replica. The router resolves the target to those addresses, opens one channel per
replica, creates each session on the replica with the fewest sessions of this router
(ties broken by a rotation that starts at random, so many routers spread too), and sends
every later call of that session to the same address. The session id names the replica
as well, so a replica that gets a call for someone else's session (a restart, or a
misrouted call) answers UNAVAILABLE with a message, never a wrong NOT_FOUND.

A replica that dies takes its sessions with it: calls fail with UNAVAILABLE, and the
caller starts the episode again on a new session, which lands on a live replica.

A router with an `owner` creates its sessions under that owner's lease and, while it has
sessions open on a replica, renews the lease there every third of it (`RenewLease`), from
a task on its loop. When the router's process dies, the renewals stop and each replica
closes its sessions within the lease (the sandbox's `leases.OwnerLeases`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType

import grpc

from artfleet.clients.replicas import resolve_replicas, split_target
from artfleet.runtime.rpc.client import aio_channel
from artfleet.runtime.tasks import cancel_and_wait
from artfleet.v1 import sandbox_pb2, sandbox_pb2_grpc

log = logging.getLogger(__name__)

# Codes after which another replica may well succeed where this one did not.
_TRY_ELSEWHERE = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
)


@dataclass
class SandboxSession:
    """One session and the replica that holds it; use `stub` for every call of it."""

    session_id: str
    address: str
    stub: sandbox_pb2_grpc.SandboxStub
    info: sandbox_pb2.Session
    _router: SandboxRouter = field(repr=False)
    _released: bool = field(default=False, repr=False)

    async def close(self, deadline_s: float = 30.0) -> bool:
        """False when the replica no longer had the session (reaped, or the replica
        restarted and lost it): closing is idempotent, so only the answer tells."""
        try:
            reply = await self.stub.CloseSession(
                sandbox_pb2.CloseSessionRequest(session_id=self.session_id), timeout=deadline_s
            )
        finally:
            self.forget()
        return bool(reply.closed)

    def forget(self) -> None:
        """No longer counts the session as open here (closed, or gone with its replica)."""
        if not self._released:
            self._released = True
            self._router._release(self.address)


class SandboxRouter:
    """Per event loop: channels belong to the loop that opened them."""

    def __init__(
        self,
        target: str,
        token: str,
        *,
        refresh_s: float = 10.0,
        owner: str = "",
        lease_s: float = 60.0,
    ) -> None:
        split_target(target)  # fail fast on a malformed target
        self.owner = owner
        self.lease_s = lease_s
        self._renewer: asyncio.Task[None] | None = None
        self._target = target
        self._token = token
        self._refresh_s = refresh_s
        self._addresses: list[str] = []
        self._resolved_at = float("-inf")
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[str, sandbox_pb2_grpc.SandboxStub] = {}
        self._pinned: dict[str, int] = {}  # sessions open per address
        self._avoid_until: dict[str, float] = {}
        self._rotation = random.randrange(1 << 16)

    async def __aenter__(self) -> SandboxRouter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            await cancel_and_wait(renewer)
        channels, self._channels = self._channels, {}
        self._stubs.clear()
        await asyncio.gather(*(ch.close() for ch in channels.values()), return_exceptions=True)

    async def replicas(self) -> list[str]:
        if time.monotonic() - self._resolved_at > self._refresh_s or not self._addresses:
            addresses = await resolve_replicas(self._target)
            if addresses:
                self._addresses = addresses
            self._resolved_at = time.monotonic()
        return list(self._addresses)

    def _stub(self, address: str) -> sandbox_pb2_grpc.SandboxStub:
        stub = self._stubs.get(address)
        if stub is None:
            channel = aio_channel(address, self._token)
            self._channels[address] = channel
            stub = self._stubs[address] = sandbox_pb2_grpc.SandboxStub(channel)
        return stub

    def order(self, addresses: Sequence[str]) -> list[str]:
        """Addresses to try for a new session: healthy first, least loaded, rotated."""
        self._rotation += 1
        now = time.monotonic()
        n = len(addresses)

        def key(index: int) -> tuple[bool, int, int]:
            address = addresses[index]
            avoided = self._avoid_until.get(address, 0.0) > now
            return avoided, self._pinned.get(address, 0), (index - self._rotation) % n

        return [addresses[i] for i in sorted(range(n), key=key)]

    def _release(self, address: str) -> None:
        self._pinned[address] = max(0, self._pinned.get(address, 0) - 1)

    async def create_session(
        self, request: sandbox_pb2.CreateSessionRequest, deadline_s: float = 120.0
    ) -> SandboxSession:
        addresses = await self.replicas()
        if not addresses:
            raise ConnectionError(f"no sandbox replica found at {self._target!r}")
        if self.owner and not request.owner:
            request.owner, request.owner_lease_s = self.owner, self.lease_s
            if self._renewer is None or self._renewer.done():
                self._renewer = asyncio.create_task(self._renew_forever(), name="sandbox-lease")
        last: grpc.aio.AioRpcError | None = None
        for address in self.order(addresses):
            stub = self._stub(address)
            try:
                info = await stub.CreateSession(request, timeout=deadline_s)
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in _TRY_ELSEWHERE:
                    raise
                log.warning("sandbox replica %s: %s; trying another", address, exc.details())
                self._avoid_until[address] = time.monotonic() + self._refresh_s
                self._resolved_at = float("-inf")  # the replica set may have changed
                last = exc
                continue
            self._pinned[address] = self._pinned.get(address, 0) + 1
            return SandboxSession(info.session_id, address, stub, info, self)
        assert last is not None
        raise last

    def in_use(self) -> list[str]:
        """Addresses where this router holds open sessions."""
        return sorted(a for a, n in self._pinned.items() if n > 0)

    async def renew(self) -> int:
        """Renews the owner's lease on every replica holding its sessions; returns how many
        sessions they reported. A replica that does not answer is tried at the next beat
        (the lease outlives two missed beats)."""
        request = sandbox_pb2.RenewLeaseRequest(owner=self.owner, lease_s=self.lease_s)
        held = 0
        for address in self.in_use():
            try:
                reply = await self._stub(address).RenewLease(request, timeout=self.lease_s / 3)
            except grpc.aio.AioRpcError as exc:
                log.warning("sandbox lease renewal at %s: %s", address, exc.details())
                continue
            held += reply.sessions
        return held

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            await self.renew()


# How a replica's NOT_FOUND begins for a session id it no longer holds: closed when its
# owner's lease ran out (an owner cut off from the replica for longer than its lease looks
# dead to it), or reaped. The caller's session is gone as with a dead replica.
SESSION_GONE = "no open session"


def is_session_gone(exc: BaseException) -> bool:
    return (
        isinstance(exc, grpc.aio.AioRpcError)
        and exc.code() == grpc.StatusCode.NOT_FOUND
        and (exc.details() or "").startswith(SESSION_GONE)
    )


def is_replica_lost(exc: BaseException) -> bool:
    """True for errors after which the episode may start again on another replica."""
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.UNAVAILABLE


def describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"
