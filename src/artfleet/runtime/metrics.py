"""The Prometheus endpoint each service exposes, and the RPC metrics every server records."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import Counter, Histogram, start_http_server

RPC_REQUESTS = Counter(
    "artfleet_rpc_requests_total",
    "gRPC requests handled, by service, method and status code",
    ["service", "method", "code"],
)
RPC_SECONDS = Histogram(
    "artfleet_rpc_seconds",
    "gRPC handling time (streams: until the stream ends)",
    ["service", "method"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)


@dataclass
class MetricsEndpoint:
    """`/metrics` over HTTP on its own thread; `port` is the bound one (0 picks a free port)."""

    host: str
    port: int
    _server: WSGIServer | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._server, self._thread = start_http_server(self.port, addr=self.host)
        self.port = self._server.server_port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
