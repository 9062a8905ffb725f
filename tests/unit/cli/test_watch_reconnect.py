"""`artfleet jobs watch` rides out a broken stream: it reopens from the event after the
last one seen (none lost, none repeated), says so on stderr, gives up after a bound, and
does not retry an error that is the request's."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from artfleet.v1 import common_pb2 as pb
from artfleet_cli.watch_stream import resumable


class _Broken(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class _Trainer:
    """A job of `total` events whose streams break after `per_stream` events each, the
    first `breaks` times; records where each stream was opened from."""

    def __init__(self, total: int, per_stream: int, breaks: int, error: _Broken) -> None:
        self.total, self.per_stream, self.breaks, self.error = total, per_stream, breaks, error
        self.opened_from: list[int] = []

    def open(self, from_seq: int) -> Iterator[pb.ProgressEvent]:
        self.opened_from.append(from_seq)
        first = max(from_seq, 1)
        for n, seq in enumerate(range(first, self.total + 1)):
            if n == self.per_stream and self.breaks > 0:
                self.breaks -= 1
                raise self.error
            yield pb.ProgressEvent(seq=seq, kind=pb.EVENT_KIND_STEP_DONE, step=seq)


UNAVAILABLE = _Broken(grpc.StatusCode.UNAVAILABLE, "the fleet's Redis is unreachable")


def test_a_broken_stream_is_reopened_after_the_last_event_seen() -> None:
    trainer = _Trainer(total=7, per_stream=3, breaks=2, error=UNAVAILABLE)
    said: list[str] = []
    pauses: list[float] = []
    events = list(resumable(trainer.open, said.append, sleep=pauses.append))
    assert [e.seq for e in events] == [1, 2, 3, 4, 5, 6, 7]
    assert trainer.opened_from == [0, 4, 7]
    assert len(said) == 2 and "UNAVAILABLE" in said[0] and "from event 4" in said[0]
    assert pauses == [1.0, 1.0]  # an event received starts the count again


def test_stream_removed_is_transient_too() -> None:
    removed = _Broken(grpc.StatusCode.UNKNOWN, "Stream removed (Socket closed)")
    trainer = _Trainer(total=3, per_stream=1, breaks=1, error=removed)
    assert [e.seq for e in resumable(trainer.open, print, sleep=lambda _: None)] == [1, 2, 3]


def test_it_gives_up_after_the_bound_with_the_last_error() -> None:
    trainer = _Trainer(total=3, per_stream=0, breaks=100, error=UNAVAILABLE)
    said: list[str] = []
    pauses: list[float] = []
    with pytest.raises(_Broken):
        list(resumable(trainer.open, said.append, attempts=4, sleep=pauses.append))
    assert pauses == [1.0, 2.0, 4.0, 8.0]
    assert said[-1] == "watch: giving up after 4 reconnects in a row"
    assert len(trainer.opened_from) == 5


def test_an_error_of_the_request_is_not_retried() -> None:
    missing = _Broken(grpc.StatusCode.NOT_FOUND, "no job with id 'x'")
    trainer = _Trainer(total=3, per_stream=0, breaks=1, error=missing)
    said: list[str] = []
    with pytest.raises(_Broken):
        list(resumable(trainer.open, said.append, sleep=lambda _: None))
    assert said == [] and trainer.opened_from == [0]
