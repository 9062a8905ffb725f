"""`fleet up` keeps its processes up: a process that exits or is killed is reported at once
(name, exit status or signal) and started again after a backoff, up to
ARTFLEET_FLEET_MAX_RESTARTS restarts within ARTFLEET_FLEET_RESTART_WINDOW_S; one more exit
stops the whole fleet with that reason.

`Watcher` is the logic, over a small interface (`Watched`, `Supervised`) that LocalFleet
and the unit tests' fakes provide; `FleetRun` is `fleet up`'s lifecycle around it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Protocol

from artfleet_cli.fleet_process import FleetStopped
from artfleet_cli.fleet_settings import FleetSettings

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Watched(Protocol):
    """One process of a fleet, as the watcher sees it."""

    @property
    def name(self) -> str: ...

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """Its exit status once it has ended (-N: killed by signal N), else None."""

    def reap(self) -> None:
        """Once it has ended: ends what it left behind (its process group)."""


class Supervised(Protocol):
    def watched(self) -> Sequence[Watched]:
        """The fleet's processes, the latest start of each."""

    def start_again(self, name: str) -> Watched:
        """Starts process `name` again, as it was started (same port, settings)."""


def describe_exit(code: int) -> str:
    """`exited with status 1`, `was killed by SIGKILL`."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 3
    window_s: float = 600.0
    first_delay_s: float = 1.0  # doubled for each restart already in the window
    max_delay_s: float = 30.0

    @classmethod
    def of(cls, settings: FleetSettings) -> RestartPolicy:
        return cls(settings.fleet_max_restarts, settings.fleet_restart_window_s)

    def delay_s(self, earlier: int) -> float:
        return float(min(self.first_delay_s * 2**earlier, self.max_delay_s))


@dataclass
class Watcher:
    fleet: Supervised
    policy: RestartPolicy
    say: Callable[[str], None]
    clock: Callable[[], float] = time.monotonic
    _exits: dict[str, list[float]] = field(default_factory=dict)  # restarts in the window
    _due: dict[str, float] = field(default_factory=dict)  # name -> when to start it again

    def step(self) -> str | None:
        """Looks at every process once: starts the ones whose backoff has passed, reports
        (and schedules) the ones that ended. Returns why the fleet must stop, else None."""
        now = self.clock()
        for name, at in sorted(self._due.items()):
            if at <= now:
                del self._due[name]
                self.say(f"restarted {name} (pid {self.fleet.start_again(name).pid})")
        for process in self.fleet.watched():
            code = None if process.name in self._due else process.poll()
            if code is not None:
                process.reap()
                if reason := self._exited(process, code, now):
                    return reason
        return None

    def _exited(self, process: Watched, code: int, now: float) -> str | None:
        name, policy = process.name, self.policy
        recent = [t for t in self._exits.get(name, []) if t > now - policy.window_s]
        what = f"{name} {describe_exit(code)} (pid {process.pid})"
        if len(recent) >= policy.max_restarts:
            reason = (
                f"{what}, after {len(recent)} restart(s) within {policy.window_s:.0f} s "
                f"(ARTFLEET_FLEET_MAX_RESTARTS={policy.max_restarts}, "
                "ARTFLEET_FLEET_RESTART_WINDOW_S)"
            )
            self.say(f"{reason}: stopping the fleet")
            return reason
        delay = policy.delay_s(len(recent))
        self._exits[name] = [*recent, now]
        self._due[name] = now + delay
        self.say(
            f"{what}; restarting it in {delay:.0f} s (restart {len(recent) + 1} of "
            f"{policy.max_restarts} within {policy.window_s:.0f} s; logs/{name}.log)"
        )
        return None


class Startable(Supervised, Protocol):
    # Set by a stop signal: the fleet's start ends at its next wait (FleetStopped).
    stopping: threading.Event

    def start(self, timeout_s: float) -> None: ...

    def stop(self, grace_s: float = 30.0) -> dict[str, int | None]: ...


class FleetRun:
    """`fleet up`'s lifecycle: SIGINT and SIGTERM caught before the first process starts
    (either one stops the start, or the watch), the fleet started, watched, stopped."""

    def __init__(
        self, fleet: Startable, settings: FleetSettings, say: Callable[[str], None]
    ) -> None:
        self.fleet = fleet
        self.watcher = Watcher(fleet, RestartPolicy.of(settings), say)
        self.signal: signal.Signals | None = None
        self._previous: dict[int, Any] = {}

    def start(self, timeout_s: float) -> None:
        """Returns once the fleet is up; FleetStopped when a signal came first (the fleet
        stops what it started whichever way its start ends)."""
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)
        self.fleet.start(timeout_s)

    def watch(self, interval_s: float = 0.5) -> str | None:
        """Until a stop signal (None) or a process exits once more than its restarts allow
        (why)."""
        try:
            while not self.fleet.stopping.wait(interval_s):
                if reason := self.watcher.step():
                    return reason
        except FleetStopped:  # the signal came as it started a process again
            pass
        return None

    def stop(self) -> None:
        try:
            self.fleet.stop()
        finally:
            for sig, previous in self._previous.items():
                signal.signal(sig, previous)
            self._previous.clear()

    def _on_signal(self, signum: int, _: FrameType | None) -> None:
        # Only a flag: the fleet's waits see it (no exception mid-spawn, mid-stop).
        self.signal = self.signal or signal.Signals(signum)
        self.fleet.stopping.set()
