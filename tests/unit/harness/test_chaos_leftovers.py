"""The chaos suite's leftover check counts only processes the fleet left: a test session's
own servers (session-scoped fixtures, children of pytest from before the fleet) are not
leftovers, and are never reaped behind their owner's back."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import time

import pytest
from chaos_fleet import _children, subreaper

_PR_GET_CHILD_SUBREAPER = 37


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


def _is_subreaper() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(0)
    assert libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
    return bool(flag.value)


def test_a_run_that_fails_leaves_pytest_an_ordinary_parent() -> None:
    # Left a subreaper, pytest would keep later tests' orphans as zombies that look alive.
    with pytest.raises(TimeoutError), subreaper():
        assert _is_subreaper()
        raise TimeoutError("the job hung")
    assert not _is_subreaper()
