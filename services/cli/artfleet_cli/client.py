"""The CLI's connections to the services, and how its errors become messages and exit codes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import grpc
import typer

from artfleet.runtime.rpc.client import sync_channel
from artfleet.v1 import trainer_pb2_grpc

# The fleet token, as every command that calls a service takes it.
TokenOpt = typer.Option(
    "", "--token", envvar="ARTFLEET_API_TOKEN", help="API token", show_default=False
)

# Exit codes: 2 = the request was wrong (bad spec, unknown job, bad token), 1 = anything else.
USAGE_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.FAILED_PRECONDITION,
    }
)


def fail(message: str, code: int = 2) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


@contextmanager
def service(target: str, token: str, what: str) -> Iterator[grpc.Channel]:
    """A channel to `what` at `target`; RPC errors become `error: ...` and an exit code."""
    if not token:
        fail("no API token: pass --token or set ARTFLEET_API_TOKEN")
    channel = sync_channel(target, token)
    try:
        yield channel
    except grpc.RpcError as exc:
        code = exc.code()
        details = exc.details()
        if code == grpc.StatusCode.UNAVAILABLE:
            fail(f"cannot reach the {what} at {target}: {details}", 1)
        fail(f"{code.name}: {details}", 2 if code in USAGE_CODES else 1)
    finally:
        channel.close()


@contextmanager
def trainer(target: str, token: str) -> Iterator[trainer_pb2_grpc.TrainerStub]:
    with service(target, token, "trainer") as channel:
        yield trainer_pb2_grpc.TrainerStub(channel)
