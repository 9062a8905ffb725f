"""One process of a local fleet: its handle, its log, and its process group.

The fleet starts each process in its own session (`start_new_session`), so its group is
everything it started that did not leave it: stopping it ends that group too, and a
process that died (killed, OOM) leaves nothing running behind it. Only these groups are
ever signalled: never anything found by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from artfleet.runtime.service import STACKS_SIGNAL
from artfleet_cli.logfiles import LogPump

STACKS_WAIT_S = 5.0  # for a stack dump to reach the log


class ServiceExited(RuntimeError):
    """A fleet process ended while starting; `code` 2 is a service's configuration error."""

    def __init__(self, name: str, code: int, tail: str) -> None:
        self.name, self.code, self.tail = name, code, tail
        super().__init__(f"{name} exited with {code}:\n{tail}")


class StartTimeout(TimeoutError):
    """Process `name` was not ready by the start's deadline; `tail`: its log since."""

    def __init__(self, name: str, message: str, tail: str = "") -> None:
        self.name, self.tail = name, tail
        super().__init__(message)


class FleetStopped(Exception):
    """`stopping` was set (a stop signal) while the fleet was starting."""


@dataclass
class FleetProcess:
    name: str
    proc: subprocess.Popen[bytes]
    grpc_port: int = 0
    log_path: Path | None = None
    pump: LogPump | None = None  # copies its output into log_path (rotated)
    log_offset: int = 0  # the log's size when it started: what came before is not its own
    own_group: bool = False  # started in its own session: its pid is its group's id
    killed_tail: str = ""  # its log's end when it outlived its grace (its stacks in it)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def drained(self) -> None:
        """Once it has exited: its last output is in its log (unless something it started
        still holds the pipe)."""
        if self.pump is not None:
            self.pump.join(2.0)

    def reap(self) -> None:
        """Once it has exited: ends what it left in its group, then drains its output."""
        self._signal_group(signal.SIGKILL)
        self.drained()

    def terminate(self, grace_s: float) -> None:
        """SIGTERM (and SIGCONT: a stopped process gets it too), SIGKILL past `grace_s`;
        then what it left in its group. Killed, it leaves its log's end (its stacks in it)
        in `killed_tail` for whoever stopped it."""
        killed = False
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.send_signal(signal.SIGCONT)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._kill_with_stacks()
                killed = True
        self.reap()  # after a kill, its output (the stacks) drained into the log
        if killed:
            self.killed_tail = self.log_tail(8000)

    def _kill_with_stacks(self) -> None:
        """SIGKILL to a process that outlived its grace, its threads' stacks first: our
        services write them to their log on STACKS_SIGNAL (faulthandler, even with the
        event loop stuck), so a hang leaves a trace of where it hung."""
        before = self._log_size()
        self.proc.send_signal(STACKS_SIGNAL)
        # faulthandler writes the whole dump at once from its signal handler: once its
        # first bytes reach the log, the rest is in the pipe, which reap() drains
        deadline = time.monotonic() + STACKS_WAIT_S
        while self._log_size() == before and self.proc.poll() is None:
            if time.monotonic() > deadline:  # not one of ours, or not scheduled in time
                break
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait(5)

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size if self.log_path is not None else 0
        except FileNotFoundError:
            return 0

    def _signal_group(self, sig: signal.Signals) -> None:
        # The group outlives its leader while a member lives, and its id is not reused
        # meanwhile: after the leader is reaped this reaches only what it left.
        if self.own_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def log_tail(self, limit: int = 3000) -> str:
        """The end of its log since it started (an earlier start's lines are not its)."""
        if self.log_path is None:
            return ""
        try:
            with self.log_path.open("rb") as log:
                size = log.seek(0, os.SEEK_END)
                # Smaller than at its start: rotated since, the file is all its own.
                start = self.log_offset if size >= self.log_offset else 0
                log.seek(max(start, size - limit))
                return log.read().decode(errors="replace")
        except OSError:
            return ""
