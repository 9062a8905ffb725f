"""How vLLM ended, from its API server's status and its log (pure: unit-tested).

vLLM's API server often exits 0 when its engine dies (the engine shuts the client down), so
its own status hides a killed EngineCore or Worker: the process that died is read from
vLLM's log, where `vllm_main` writes each multiprocessing child's non-zero exit code (and
vLLM writes a Worker's). The first such line is the root cause; what followed is fallout.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass
from pathlib import Path

from artfleet_inference.vllm_main import CHILD_EXIT_MARK

_CHILD_LINES = (
    # vllm_main's line: name, pid, code.
    re.compile(
        re.escape(CHILD_EXIT_MARK)
        + r" name=(?P<name>\S+) pid=(?P<pid>\d+) exitcode=(?P<code>-?\d+)"
    ),
    # vLLM's own (v1/executor/multiproc_executor.py, v1/utils.py).
    re.compile(r"Worker proc (?P<name>\S+) died unexpectedly \(exit code: (?P<code>-?\d+)\)"),
    re.compile(r"Process (?P<name>\S+) \(PID: (?P<pid>\d+)\) died with exit code (?P<code>-?\d+)"),
)  # fmt: skip


@dataclass(frozen=True)
class ChildEnd:
    name: str
    pid: int | None
    code: int  # as Popen's returncode: -N for signal N


@dataclass(frozen=True)
class VllmEnd:
    server_pid: int
    server_code: int | None  # None: the API server still ran when a child's end was read
    child: ChildEnd | None = None

    def exit_status(self) -> int:
        """What the inference service exits with: the dead process's code, 128 + N for
        signal N (a shell's convention); 1 when vLLM exited 0 by itself."""
        for code in (self.child.code if self.child else None, self.server_code):
            if code is not None and code < 0:
                return 128 + (-code)
            if code:
                return min(code, 255)
        return 1

    def describe(self) -> str:
        """One line: what died and how, then what the API server did."""
        if self.server_code is None:
            server = f"its API server (pid {self.server_pid}) still ran"
        else:
            server = f"its API server (pid {self.server_pid}) {status_text(self.server_code)}"
        if self.child is None:
            return f"vLLM died: {server}"
        name, pid = self.child.name, self.child.pid
        child = name if pid is None else f"{name} (pid {pid})"
        return f"vLLM died: its {child} {status_text(self.child.code)}; then {server}"


def status_text(code: int) -> str:
    """`exited with 1`, `was killed by SIGKILL (signal 9; ...)`."""
    if code >= 0:
        return f"exited with {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    why = ""
    if -code == signal.SIGKILL:
        why = "; the kernel's OOM killer sends it when memory runs out: see dmesg"
    text = f"was killed by {name} (signal {-code}{why})"
    return text


def first_child_end(log_text: str) -> ChildEnd | None:
    """The earliest vLLM child that ended with a non-zero code, as the log tells it."""
    found: list[tuple[int, ChildEnd]] = []
    for pattern in _CHILD_LINES:
        match = pattern.search(log_text)
        if match is None:
            continue
        pid = match.groupdict().get("pid")
        end = ChildEnd(match["name"], int(pid) if pid else None, int(match["code"]))
        if end.code != 0:
            found.append((match.start(), end))
    return min(found, key=lambda pair: pair[0])[1] if found else None


class LogTail:
    """The lines a log gains from now on (vLLM appends to one log across restarts)."""

    KEPT_CHARS = 1 << 20  # `text`: enough for a failed start's error lines

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = path.stat().st_size if path.exists() else 0
        self._partial = b""
        self.text = ""  # the first KEPT_CHARS of what was read

    def read(self) -> str:
        """The complete lines written since the last read (decoded leniently)."""
        try:
            with open(self._path, "rb") as f:
                f.seek(self._offset)
                new = f.read()
        except FileNotFoundError:
            return ""
        self._offset += len(new)
        done, _, self._partial = (self._partial + new).rpartition(b"\n")
        lines = done.decode(errors="replace") + "\n" if done else ""
        if len(self.text) < self.KEPT_CHARS:
            self.text += lines[: self.KEPT_CHARS - len(self.text)]
        return lines
