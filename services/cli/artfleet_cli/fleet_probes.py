"""How a local fleet asks whether a process is ready. Each probe returns (ready, what it
saw), the latter for the message of a start that timed out."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def grpc_serving(stub: health_pb2_grpc.HealthStub) -> tuple[bool, str]:
    """The gRPC health service says SERVING."""
    try:
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2)
    except grpc.RpcError as exc:
        code = exc.code() if hasattr(exc, "code") else None
        return False, code.name if code is not None else type(exc).__name__
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, status


def redis_answers(client: Any) -> tuple[bool, str]:
    import redis

    try:
        client.ping()
    except redis.ConnectionError as exc:
        return False, str(exc)
    return True, "PONG"


def http_answers(url: str, any_answer: bool = False) -> tuple[bool, str]:
    """`url` answers 200; with `any_answer`, any answer at all (the API's /health answers
    503 while a service it reaches is still starting)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return True, str(reply.status)
    except urllib.error.HTTPError as exc:
        return any_answer, f"{exc.code}{_down(exc)}"
    except OSError as exc:
        return False, str(getattr(exc, "reason", exc))


def _down(answer: urllib.error.HTTPError) -> str:
    """What the API's /health names down, if that is what answered."""
    try:
        dependencies = json.loads(answer.read())["dependencies"]
        down = [name for name, state in dependencies.items() if not state["ok"]]
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return ""
    return f" (down: {', '.join(down)})" if down else ""
