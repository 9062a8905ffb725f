"""The chaos suite's leftover check counts only processes the fleet left: a test session's
own servers (session-scoped fixtures, children of pytest from before the fleet) are not
leftovers, and are never reaped behind their owner's back."""

from __future__ import annotations

import subprocess
import sys
import time

from chaos_fleet import _children


def test_children_before_the_fleet_are_excluded() -> None:
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert server.pid in {pid for pid, _ in _children(reap=False)}
        assert server.pid not in {pid for pid, _ in _children(exclude=frozenset({server.pid}))}
    finally:
        server.kill()
        server.wait()


def test_excluded_zombies_are_left_to_their_owner() -> None:
    server = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    deadline = time.monotonic() + 60
    while not _is_zombie(server.pid):  # exited, not yet waited for
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.05)
    _children(exclude=frozenset({server.pid}))
    assert server.wait(timeout=30) == 3  # still its owner's to reap, with its real code


def _is_zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as status:
        return any(line.startswith("State:\tZ") for line in status)
