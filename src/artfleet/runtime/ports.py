"""Loopback ports held for child processes until they listen on them.

A port found free and let go (`service.free_port`) is free for anyone: on a busy machine an
outgoing connection of any process can take it as its ephemeral port before the child
that was told to listen there has started (CI saw a rollout service die with
`Address already in use` on its metrics port). A held port is bound, not listening, with
SO_REUSEADDR: the kernel gives it to no `bind(0)` and no `connect`, and a server that binds
it with SO_REUSEADDR itself (gRPC, uvicorn, the Prometheus client, redis-server and
Prometheus all do) listens there all the same. Holding it for the fleet's life also keeps
a restarted service's port its own while it is down.
"""

from __future__ import annotations

import socket
import threading

LOOPBACK = "127.0.0.1"


class PortHold:
    """Ports this process holds for its children; `release()` lets them all go."""

    def __init__(self, host: str = LOOPBACK) -> None:
        self.host = host
        self._sockets: dict[int, socket.socket] = {}
        self._lock = threading.Lock()

    def pick(self) -> int:
        """A new port, free now and held from this moment."""
        sock = self._bound(0)
        assert sock is not None  # port 0: the kernel picks a free one or raises
        port = int(sock.getsockname()[1])
        with self._lock:
            self._sockets[port] = sock
        return port

    def hold(self, port: int) -> bool:
        """Hold `port` too (one chosen elsewhere, or recorded by a past run); False when
        another process holds it, whose clash the service that binds it then reports."""
        with self._lock:
            if port in self._sockets:
                return True
        sock = self._bound(port)
        if sock is None:
            return False
        with self._lock:
            self._sockets[port] = sock
        return True

    def held(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._sockets)

    def release(self) -> None:
        with self._lock:
            sockets, self._sockets = list(self._sockets.values()), {}
        for sock in sockets:
            sock.close()

    def _bound(self, port: int) -> socket.socket | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, port))
        except OSError:
            sock.close()
            if port == 0:
                raise
            return None
        return sock
