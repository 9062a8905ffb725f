"""`fleet up`'s watcher and lifecycle (artfleet_cli.fleet_watch) over in-process fakes of
its small process interface, and a fleet process's cleanup of its own process group."""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from waiting import wait_for

from artfleet_cli.fleet import LocalFleet
from artfleet_cli.fleet_process import FleetStopped, ServiceExited
from artfleet_cli.fleet_settings import FleetSettings
from artfleet_cli.fleet_watch import FleetRun, RestartPolicy, Watcher, describe_exit


@dataclass
class FakeProcess:
    name: str
    pid: int
    code: int | None = None
    reaped: bool = False

    def poll(self) -> int | None:
        return self.code

    def reap(self) -> None:
        assert self.code is not None, "reaped while running"
        self.reaped = True


@dataclass
class FakeFleet:
    processes: list[FakeProcess]
    respawned: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)
    stopped: int = 0

    def watched(self) -> list[FakeProcess]:
        return list(self.processes)

    def start_again(self, name: str) -> FakeProcess:
        index = next(i for i, p in enumerate(self.processes) if p.name == name)
        self.respawned.append(name)
        self.processes[index] = FakeProcess(name, self.processes[index].pid + 1000)
        return self.processes[index]

    def process(self, name: str) -> FakeProcess:
        return next(p for p in self.processes if p.name == name)

    def start(self, timeout_s: float) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # as `timeout 60 artfleet fleet up` does
        wait_for("the handler to set stopping", self.stopping.is_set, 30)
        raise FleetStopped("stopped while starting")

    def stop(self, grace_s: float = 30.0) -> dict[str, int | None]:
        self.stopped += 1
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _watcher(policy: RestartPolicy) -> tuple[FakeFleet, Watcher, list[str], Clock]:
    fleet = FakeFleet([FakeProcess("redis", 10), FakeProcess("trainer", 20)])
    said: list[str] = []
    clock = Clock()
    return fleet, Watcher(fleet, policy, said.append, clock), said, clock


def test_an_exit_is_reported_at_once_and_restarted_after_its_backoff() -> None:
    fleet, watcher, said, clock = _watcher(RestartPolicy(max_restarts=3, window_s=600))
    assert watcher.step() is None and said == []
    fleet.process("trainer").code = -signal.SIGKILL
    assert watcher.step() is None
    assert fleet.process("trainer").reaped  # what it left in its group is ended at once
    assert said == [
        "trainer was killed by SIGKILL (pid 20); restarting it in 1 s "
        "(restart 1 of 3 within 600 s; logs/trainer.log)"
    ]
    clock.now += 0.5
    assert watcher.step() is None and fleet.respawned == []  # its backoff has not passed
    clock.now += 0.5
    assert watcher.step() is None and fleet.respawned == ["trainer"]
    assert said[-1] == "restarted trainer (pid 1020)"
    fleet.process("trainer").code = 1
    watcher.step()
    assert said[-1].startswith("trainer exited with status 1 (pid 1020); restarting it in 2 s")


def test_one_exit_more_than_the_bound_stops_the_fleet_with_the_reason() -> None:
    fleet, watcher, said, clock = _watcher(RestartPolicy(max_restarts=2, window_s=60))
    for _ in range(2):
        fleet.process("redis").code = 1
        assert watcher.step() is None
        clock.now += 10  # past its backoff, within the window
        watcher.step()
    assert fleet.respawned == ["redis", "redis"]
    fleet.process("redis").code = -signal.SIGTERM
    reason = watcher.step()
    assert reason == (
        "redis was killed by SIGTERM (pid 2010), after 2 restart(s) within 60 s "
        "(ARTFLEET_FLEET_MAX_RESTARTS=2, ARTFLEET_FLEET_RESTART_WINDOW_S)"
    )
    assert said[-1] == f"{reason}: stopping the fleet"
    clock.now += 100
    watcher.step()
    assert fleet.respawned == ["redis", "redis"]  # not started again


def test_restarts_older_than_the_window_are_forgotten() -> None:
    fleet, watcher, said, clock = _watcher(RestartPolicy(max_restarts=1, window_s=60))
    fleet.process("trainer").code = 1
    watcher.step()
    clock.now += 61
    watcher.step()  # restarted; its one restart is now out of the window
    fleet.process("trainer").code = 1
    assert watcher.step() is None
    assert "restarting it in 1 s (restart 1 of 1" in said[-1]


def test_no_restart_allowed_stops_at_the_first_exit() -> None:
    fleet, watcher, _, _ = _watcher(RestartPolicy(max_restarts=0))
    fleet.process("trainer").code = 0
    assert (watcher.step() or "").startswith("trainer exited with status 0 (pid 20), after 0")
    assert fleet.respawned == []


def test_exits_are_described_by_status_or_signal_name() -> None:
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(-signal.SIGSEGV) == "was killed by SIGSEGV"
    assert RestartPolicy().delay_s(10) == 30.0  # bounded


def test_a_sigterm_while_starting_ends_the_start_and_the_handlers_are_restored() -> None:
    """The handlers are in place before the first process starts; a signal only sets the
    fleet's `stopping` (the fleet's waits end the start), and stop() puts them back."""
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    fleet = FakeFleet([])
    said: list[str] = []
    run = FleetRun(fleet, FleetSettings(), said.append)
    try:
        with pytest.raises(FleetStopped):
            run.start(60)
    finally:
        run.stop()
    assert run.signal == signal.SIGTERM and fleet.stopped == 1
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_fleet_that_is_stopping_starts_nothing_more(tmp_path: Path) -> None:
    fleet = LocalFleet(tmp_path, api=False)
    fleet.stopping.set()
    with pytest.raises(FleetStopped):
        fleet.start(60)
    assert fleet.processes == [] and not (tmp_path / "logs" / "redis.log").exists()


def test_a_failed_start_shows_only_this_starts_log_lines(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "inference.log").write_text("the previous start's last words\n")
    fleet = LocalFleet(tmp_path)
    crash = "print('this start: loading'); raise SystemExit('this start: out of memory')"
    fleet._spawn("inference", [sys.executable, "-c", crash], dict(os.environ))
    process = fleet.processes[0]
    process.proc.wait(60)
    with pytest.raises(ServiceExited) as info:
        fleet._check_alive(process)
    fleet.stop()
    assert info.value.tail == "this start: loading\nthis start: out of memory\n"
    assert (tmp_path / "logs" / "inference.log").read_text().startswith("the previous")


def test_a_process_that_ends_takes_what_it_left_in_its_group_with_it(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    fleet = LocalFleet(tmp_path)
    # A service that started a helper and died (killed, OOM): the helper is still running.
    pid_file = tmp_path / "helper.pid"
    leaves = f"sleep 600 > /dev/null & echo $! > {pid_file}; exit 0"
    fleet._spawn("reward", ["sh", "-c", leaves], {"PATH": os.environ["PATH"]})
    process = fleet.processes[0]
    process.proc.wait(60)
    helper = int(wait_for("the helper's pid", lambda: _read(pid_file), 30))
    try:
        assert _running(helper)
        process.reap()  # as the watcher does once a process ended
        wait_for("the helper ended", lambda: not _running(helper), 30)
    finally:
        fleet.stop()


def _read(path: Path) -> str:
    return path.read_text().strip() if path.is_file() else ""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
