"""A child started in a process group of its own that dies with this process, and stopped
as a group (vLLM's API server, its EngineCore, its Worker and their resource tracker).

vLLM's engine processes may ignore SIGTERM or outlive the API server; a stop that waited
only for the server left them running under PID 1. Here a stop waits for the whole group,
and SIGKILLs it once the grace is spent.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)
_PR_SET_PDEATHSIG = 1
_POLL_S = 0.2
KILL_WAIT_S = 10.0  # after SIGKILL: the kernel frees a large process's memory first


def die_with_parent() -> Callable[[], None]:
    """A `preexec_fn`: the child gets SIGKILL when this process dies, even by SIGKILL.

    The kernel sends it when the *thread* that forked the child ends, so the child must be
    started from a thread that lives as long as the process: the main one."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("start the child from the main thread (PR_SET_PDEATHSIG)")
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before fork: no dlopen in the child
    parent = os.getpid()

    def preexec() -> None:
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(126)
        if os.getppid() != parent:  # died before prctl: no signal will come
            os._exit(1)

    return preexec


def spawn_group(
    argv: Sequence[str], env: dict[str, str], out: IO[bytes]
) -> subprocess.Popen[bytes]:
    """`argv` as the leader of a new session (its pid is the group's id)."""
    return subprocess.Popen(
        argv,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=die_with_parent(),
    )


def group_members(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """The live processes of group `pgid` (zombies are dead: they only wait to be reaped)."""
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended while listed
        state, group = parse_stat(stat)
        if group == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def parse_stat(stat: str) -> tuple[str, int]:
    """(state, pgrp) from a /proc/<pid>/stat line; the name may hold spaces and ')'."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[2])


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group has ended
        os.killpg(pgid, sig)


async def stop_group(
    proc: subprocess.Popen[bytes], grace_s: float, kill_wait_s: float = KILL_WAIT_S
) -> None:
    """SIGTERM to the group `proc` leads, SIGKILL to it past `grace_s` if any member lives
    (the leader exited or not), then wait until none does (at most `kill_wait_s`)."""
    pgid = proc.pid
    signal_group(pgid, signal.SIGTERM)
    if await _group_ended(proc, grace_s):
        return
    left = group_members(pgid)
    log.warning("vLLM's process group %d outlived %.0fs: SIGKILL to %s", pgid, grace_s, left)
    signal_group(pgid, signal.SIGKILL)
    if not await _group_ended(proc, kill_wait_s):
        log.error("vLLM's process group %d still has %s", pgid, group_members(pgid))


async def _group_ended(proc: subprocess.Popen[bytes], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while True:
        proc.poll()  # reap the leader: a zombie leader would keep the group listed
        if proc.returncode is not None and not group_members(proc.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
