"""Running one sandboxed command: capped output, a timeout that kills the whole tree.

The event loop reads both pipes through a `SubprocessProtocol`, so output is consumed as
it arrives: the first N bytes are kept and the rest is counted and dropped. A command
that writes gigabytes therefore neither blocks on a full pipe nor grows server memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from artfleet_sandbox.backend import ExecOutcome

# Every sandboxed process carries this variable; its value names the session and the
# command. Process groups are not enough to find a tree (`setsid` leaves the group), and
# the kernel keeps a process's initial environment readable in /proc/<pid>/environ.
TAG_VAR = "ARTFLEET_SANDBOX_TAG"

# After the main process exits, a background child may still hold the pipes open; its
# output after this grace period is not part of the command's result.
PIPE_GRACE_S = 0.5
# SIGKILL is final, but a process in uninterruptible sleep may take a moment to go.
KILL_WAIT_S = 5.0
_KILL_ROUNDS = 20  # a fork bomb may spawn while we scan; scan again until nothing is left


class Capture:
    """Keeps the first `head` bytes (and optionally the last `tail`) of a stream."""

    def __init__(self, head: int, tail: int = 0) -> None:
        self._head_cap = max(0, head)
        self._tail_cap = max(0, tail)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self._tail_cap:
            self._tail += data[-self._tail_cap :]
            excess = len(self._tail) - self._tail_cap
            if excess > 0:
                del self._tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self._head) + len(self._tail)

    def value(self) -> bytes:
        if not self._tail:
            return bytes(self._head)
        omitted = self.total - len(self._head) - len(self._tail)
        marker = f"\n[... {omitted} bytes omitted ...]\n".encode() if omitted else b""
        return bytes(self._head) + marker + bytes(self._tail)


class _Collector(asyncio.SubprocessProtocol):
    def __init__(self, loop: asyncio.AbstractEventLoop, captures: dict[int, Capture]) -> None:
        self._captures = captures
        self._open = set(captures)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.pipes_closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        capture = self._captures.get(fd)
        if capture is not None:
            capture.feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open.discard(fd)
        if not self._open and not self.pipes_closed.done():
            self.pipes_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


# Applies resource limits, then execs the real command. A `preexec_fn` would be simpler,
# but it makes CPython run fork handlers in the child, and grpc's crash there (segfault).
# util-linux's `prlimit` does it without an interpreter; this fallback, for hosts without
# it, costs an interpreter start per command and per REPL shell (docs/benchmarks.md).
_LIMITER = """
import os, resource, sys
for item in filter(None, sys.argv[1].split(",")):
    res, value = (int(part) for part in item.split("="))
    resource.setrlimit(res, (value, value))
os.execv(sys.argv[2], sys.argv[2:])
"""


# prlimit's option for each limit is the constant's name: RLIMIT_NOFILE -> --nofile. The
# first name wins: RLIMIT_OFILE, an alias prlimit does not know, sorts after it.
_PRLIMIT_NAMES: dict[int, str] = {}
for _name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_")):
    _PRLIMIT_NAMES.setdefault(getattr(resource, _name), _name.removeprefix("RLIMIT_").lower())


def rlimit_prefix(limits: Mapping[int, int], prlimit: str | None = "") -> list[str]:
    """An argv prefix that lowers resource limits (soft and hard) and then execs the rest
    of the argv: `prlimit` (found on the server's PATH unless given; None = never), else a
    Python launcher.

    Values are clamped to the current hard limit here, in the parent, so the launcher only
    makes `setrlimit` calls that cannot fail. The argv that follows must start with an
    absolute path.
    """
    pairs: list[tuple[int, int]] = [(resource.RLIMIT_CORE, 0)]  # no core dumps in workspaces
    for res, value in limits.items():
        if value <= 0:
            continue
        _, hard = resource.getrlimit(res)
        pairs.append((res, value if hard == resource.RLIM_INFINITY else min(value, hard)))
    found = shutil.which("prlimit") if prlimit == "" else prlimit
    if found and all(res in _PRLIMIT_NAMES for res, _ in pairs):
        return [found, *(f"--{_PRLIMIT_NAMES[res]}={value}" for res, value in pairs), "--"]
    spec = ",".join(f"{res}={value}" for res, value in pairs)
    # -I -S: ignore PYTHON* variables, user site and site-packages; start fast.
    return [sys.executable, "-I", "-S", "-c", _LIMITER, spec]


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _tagged_pids(prefix: bytes) -> list[int]:
    # Every session's close scans every process of the host: raw reads and one substring
    # search (a variable starts the block or follows a NUL) cost a fifth of file objects
    # and a split per process.
    own = os.getpid()
    marker = b"\0" + prefix
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == own:
            continue
        environ = _read_environ(entry)
        if environ.startswith(prefix) or marker in environ:
            found.append(int(entry))
    return found


def _read_environ(pid: str) -> bytes:
    """A process's environment block; b"" when it is gone or not ours to read."""
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY)
    except OSError:
        return b""
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        return b""
    finally:
        os.close(fd)
    return b"".join(chunks)


def kill_tagged(tag_prefix: str) -> int:
    """SIGKILL every process whose TAG_VAR starts with `tag_prefix`; returns how many.

    Blocking (it scans /proc): call it through `asyncio.to_thread`.
    """
    prefix = f"{TAG_VAR}={tag_prefix}".encode()
    killed = 0
    for _ in range(_KILL_ROUNDS):
        pids = _tagged_pids(prefix)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def _exit_code(returncode: int | None, timed_out: bool) -> int:
    if timed_out or returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode


async def _wait(proto: _Collector, pid: int, tag: str, timeout_s: float) -> bool:
    """Wait for the process and its output; on timeout kill the tree. True if timed out."""
    timed_out = False
    try:
        await asyncio.wait_for(asyncio.shield(proto.exited), timeout_s)
    except TimeoutError:
        timed_out = True
        kill_group(pid)
        await asyncio.to_thread(kill_tagged, tag)  # also what left the group (setsid)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proto.exited), KILL_WAIT_S)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(proto.pipes_closed), PIPE_GRACE_S)
    return timed_out


async def run_process(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    timeout_s: float,
    max_output_bytes: int,
    stdin: bytes = b"",
    merge_stderr: bool = False,
    tail_bytes: int = 0,
    argv_prefix: Sequence[str] = (),
) -> ExecOutcome:
    """Run argv in a new session; on timeout SIGKILL its group and everything tagged so.

    The caller tags `env` with TAG_VAR; its exact value is the kill scope on timeout.
    With `merge_stderr` both streams go to stdout; `tail_bytes` also keeps the stream's end.
    `argv_prefix` comes first on the command line (see `rlimit_prefix`).
    """
    loop = asyncio.get_running_loop()
    captures = {1: Capture(max_output_bytes, tail_bytes)}
    if not merge_stderr:
        captures[2] = Capture(max_output_bytes, tail_bytes)
    started = time.monotonic()
    transport, proto = await loop.subprocess_exec(
        lambda: _Collector(loop, captures),
        *argv_prefix,
        *argv,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,  # its own session and process group: killpg reaches the tree
    )
    pid = transport.get_pid()
    try:
        if stdin:
            writer = transport.get_pipe_transport(0)
            assert isinstance(writer, asyncio.WriteTransport)
            writer.write(stdin)  # buffered by the loop; a command that never reads can't block us
            writer.write_eof()
        timed_out = await _wait(proto, pid, env[TAG_VAR], timeout_s)
    finally:
        if not proto.exited.done():  # cancelled (client went away) or stuck: leave nothing behind
            kill_group(pid)
        transport.close()
    out = captures[1]
    err = captures.get(2) or Capture(0)
    return ExecOutcome(
        exit_code=_exit_code(transport.get_returncode(), timed_out),
        timed_out=timed_out,
        stdout=out.value(),
        stderr=err.value(),
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        duration_s=time.monotonic() - started,
    )
