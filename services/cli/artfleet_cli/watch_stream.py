"""A job's event stream that survives a transient break: `jobs watch` reconnects
(`artfleet.runtime.rpc.reconnect` says when and how long to pause), from the event after
the last one seen, and says so on stderr; past the bound the last error goes up and the
CLI exits 1 with it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

import grpc

from artfleet.runtime.rpc import reconnect
from artfleet.v1 import common_pb2 as pb

OpenStream = Callable[[int], Iterable[pb.ProgressEvent]]


def resumable(
    open_stream: OpenStream,
    say: Callable[[str], None],
    *,
    from_seq: int = 0,
    attempts: int = reconnect.ATTEMPTS,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[pb.ProgressEvent]:
    """The events of `open_stream(from_seq)`, reopened after a transient break."""
    next_seq = from_seq
    failures = 0
    while True:
        try:
            for event in open_stream(next_seq):
                failures = 0
                next_seq = event.seq + 1
                yield event
            return
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details()
            if not reconnect.transient(code, details):
                raise
            if failures >= attempts:
                say(f"watch: giving up after {attempts} reconnects in a row")
                raise
            failures += 1
            pause = reconnect.pause_s(failures)
            say(
                f"watch: the stream broke ({code.name}: {details}); reconnecting in "
                f"{pause:g}s from event {next_seq} (attempt {failures} of {attempts})"
            )
            sleep(pause)
