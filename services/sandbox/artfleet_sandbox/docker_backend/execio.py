"""One command in a container: docker's multiplexed exec stream, read with caps and a deadline.

Docker frames a non-TTY exec stream as `[stream, 0, 0, 0, size (4 bytes BE)] payload`.
We read the raw socket ourselves (the SDK's `exec_run` has no timeout and buffers all
output), keep the first N bytes of each stream, and count the rest. Blocking: it runs on
the backend's thread pool.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from artfleet_sandbox.procs import Capture

_HEADER = struct.Struct(">BxxxI")
_STDOUT, _STDERR = 1, 2
_READ_CHUNK = 256 * 1024
# After the kill, how long to wait for the stream to end before giving up on it.
KILL_GRACE_S = 5.0


class FrameDemux:
    """Splits docker's multiplexed stream into (stream, payload) pieces as bytes arrive."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._want = 0  # payload bytes still owed to the current frame
        self._stream = 0

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        self._buffer += data
        while self._buffer:
            if self._want:
                piece = bytes(self._buffer[: self._want])
                del self._buffer[: len(piece)]
                self._want -= len(piece)
                yield self._stream, piece
                continue
            if len(self._buffer) < _HEADER.size:
                return
            self._stream, self._want = _HEADER.unpack_from(self._buffer)
            del self._buffer[: _HEADER.size]


@dataclass
class StreamResult:
    stdout: Capture
    stderr: Capture
    timed_out: bool = False
    output_limit_hit: bool = False
    duration_s: float = 0.0


@dataclass(frozen=True)
class ReadLimits:
    timeout_s: float
    max_output_bytes: int  # kept per stream (the head)
    drain_limit_bytes: int  # kill the command past this much output in all
    tail_bytes: int = 0  # also keep this much of the end
    merge: bool = False  # stderr goes into stdout, in arrival order


def _raw(sock: Any) -> socket.socket:
    # The SDK hands back a SocketIO wrapper around the hijacked connection.
    return getattr(sock, "_sock", sock)


def _send_stdin(raw: socket.socket, data: bytes) -> None:
    # On its own thread: a command that writes before it reads would otherwise deadlock
    # against us writing before we read.
    with contextlib.suppress(OSError):
        raw.sendall(data)
    with contextlib.suppress(OSError):
        raw.shutdown(socket.SHUT_WR)  # EOF on the command's stdin


def _start_kill(kill: Callable[[], None]) -> threading.Thread:
    # On its own thread, while we keep draining: the engine stalls a new exec in this
    # container while an old one's output sits unread (seen with `yes`).
    thread = threading.Thread(target=kill, name="exec-kill", daemon=True)
    thread.start()
    return thread


def read_exec_stream(
    sock: Any, stdin: bytes, limits: ReadLimits, kill: Callable[[], None]
) -> StreamResult:
    """Read an exec's output until it ends; on timeout or too much output call `kill`."""
    raw = _raw(sock)
    killer: threading.Thread | None = None
    out = Capture(limits.max_output_bytes, limits.tail_bytes)
    err = out if limits.merge else Capture(limits.max_output_bytes, limits.tail_bytes)
    result = StreamResult(stdout=out, stderr=err)
    started = time.monotonic()
    writer = None
    if stdin:
        writer = threading.Thread(target=_send_stdin, args=(raw, stdin), daemon=True)
        writer.start()
    else:
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_WR)
    demux = FrameDemux()
    deadline = started + limits.timeout_s
    killed = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if killed:
                    break  # killed and still streaming: stop waiting for it
                result.timed_out = killed = True
                killer = _start_kill(kill)
                deadline = time.monotonic() + KILL_GRACE_S
                continue
            raw.settimeout(remaining)
            try:
                data = raw.recv(_READ_CHUNK)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            for stream, payload in demux.feed(data):
                (err if stream == _STDERR else out).feed(payload)
            if (
                not killed
                and out.total + (0 if err is out else err.total) > limits.drain_limit_bytes
            ):
                result.output_limit_hit = killed = True
                killer = _start_kill(kill)
                deadline = time.monotonic() + KILL_GRACE_S
    finally:
        with contextlib.suppress(OSError):
            raw.close()
        if writer is not None:
            writer.join(timeout=1.0)
        if killer is not None:
            killer.join(timeout=KILL_GRACE_S)
    result.duration_s = time.monotonic() - started
    return result
