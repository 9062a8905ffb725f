"""`python -m artfleet.runtime.healthcheck [host:port]`: exit 0 when the gRPC health service says
SERVING, else 1. Container healthchecks run it, so it imports only grpc (and, with
`--policy`, the health module) and stays quick.

The default target is this container's own service: 127.0.0.1 and `ARTFLEET_PORT`.
`--policy URL` checks an OpenAI-compatible policy endpoint instead (the inference service,
which is HTTP): it lists its models to the fleet token (`ARTFLEET_API_TOKEN`), the check
the API's `/health` makes (`artfleet.runtime.health.probe_policy`).
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def check(target: str, service: str = "", timeout_s: float = 3.0) -> tuple[bool, str]:
    """(serving, what was seen) for one Health.Check call."""
    try:
        with grpc.insecure_channel(target) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
            )
    except grpc.RpcError as exc:
        return False, f"{exc.code().name}: {exc.details()}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m artfleet.runtime.healthcheck")
    default = f"127.0.0.1:{os.environ.get('ARTFLEET_PORT', '50051')}"
    parser.add_argument("target", nargs="?", default=default, help=f"host:port ({default})")
    parser.add_argument("--service", default="", help="health service name ('' = overall)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (3)")
    parser.add_argument("--policy", metavar="URL", help="an OpenAI base URL to check instead")
    args = parser.parse_args(argv)
    if args.policy:
        from artfleet.runtime.health import probe_policy  # only this mode needs it

        token = os.environ.get("ARTFLEET_API_TOKEN", "")
        ok, seen = probe_policy(args.policy, token, args.timeout)
        print(seen, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    ok, seen = check(args.target, args.service, args.timeout)
    print(f"{args.target}: {seen}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
