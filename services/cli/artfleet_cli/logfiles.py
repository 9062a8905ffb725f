"""The local fleet's log files, size-bounded: a thread of the CLI copies each process's
output (stdout and stderr, one pipe) into WORKDIR/logs/<name>.log and rotates it past
LOG_MAX_BYTES (`<name>.log.1` the newest of LOG_BACKUPS backups), so a service that floods
its output fills `LOG_BACKUPS + 1` files at most, not the disk.

The CLI owns the files rather than each service: a pipe carries everything a process
writes (crash tracebacks, redis-server's and vLLM's output too), not only its logging.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import IO

LOG_MAX_BYTES = 16 * 1024 * 1024
LOG_BACKUPS = 3
_READ_CHUNK = 64 * 1024


class RotatingLog:
    """Appends to `path` (kept across restarts, like `open(path, "ab")`); past `max_bytes`
    the file becomes `path.1`, `path.1` becomes `path.2`, ..., the oldest is dropped.
    A file is cut at a line's end when the line fits in it."""

    def __init__(self, path: Path, max_bytes: int = LOG_MAX_BYTES, backups: int = LOG_BACKUPS):
        if max_bytes <= 0 or backups < 1:
            raise ValueError("a rotating log needs max_bytes > 0 and backups >= 1")
        self.path = path
        self.max_bytes = max_bytes
        self.backups = backups
        self._file = path.open("ab")
        self._size = self._file.tell()

    def write(self, data: bytes) -> None:
        while data:
            room = self.max_bytes - self._size
            if len(data) <= room:
                self._put(data)
                return
            # The lines that fit go here; a line longer than a whole file is cut.
            cut = data.rfind(b"\n", 0, max(room, 0)) + 1 or (room if self._size == 0 else 0)
            self._put(data[:cut])
            self._rotate()
            data = data[cut:]

    def _put(self, data: bytes) -> None:
        self._file.write(data)
        self._file.flush()  # read while the fleet runs (a service's crash, `tail -f`)
        self._size += len(data)

    def _rotate(self) -> None:
        self._file.close()
        for n in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{n + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self._file = self.path.open("ab")
        self._size = 0

    def close(self) -> None:
        self._file.close()


class LogPump:
    """A daemon thread copying `source` (a child's stdout pipe) into `log` until EOF (the
    child and whatever inherited the pipe ended); `join()` waits for the last bytes."""

    def __init__(self, source: IO[bytes], log: RotatingLog) -> None:
        self._source = source
        self._log = log
        self._thread = threading.Thread(target=self._run, name=f"log-{log.path.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fd = self._source.fileno()
        try:
            while chunk := os.read(fd, _READ_CHUNK):
                # A full disk drops the output; reading goes on, or the child would block
                # on its full pipe.
                with contextlib.suppress(OSError, ValueError):
                    self._log.write(chunk)
        finally:
            self._source.close()
            self._log.close()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
