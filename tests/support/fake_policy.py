"""A stand-in policy endpoint: `GET /v1/models` behind a bearer token, as the inference
service's front and the trainer's own server answer it, on a free loopback port. Lets
tests of the health checks (`artfleet.runtime.health.probe_policy` and who asks it) run
without a model."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class FakePolicy:
    token: str
    port: int = 0
    serving: bool = True  # False: 503, as a front whose vLLM is gone

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@contextmanager
def fake_policy(token: str) -> Iterator[FakePolicy]:
    policy = FakePolicy(token)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {policy.token}":
                self._reply(401, {"error": {"message": "bad or missing token"}})
            elif not policy.serving:
                self._reply(503, {"status": "vllm not running"})
            elif self.path == "/v1/models":
                self._reply(200, {"object": "list", "data": [{"id": "base", "object": "model"}]})
            else:
                self._reply(404, {"error": {"message": "no route"}})

        def _reply(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: object) -> None:  # quiet test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    policy.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield policy
    finally:
        server.shutdown()
        server.server_close()
