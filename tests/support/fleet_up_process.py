"""`artfleet fleet up` run as a user runs it (a process, its output in a file), and what
it leaves behind: the processes it said it started, and any process that names its
workdir (the services' environment does, so their children's does too)."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

from waiting import poll, wait_for

BANNER_END = "  source "


class FleetUp:
    """One `fleet up` process, its output in a file; stopped with SIGINT as by Ctrl-C."""

    def __init__(self, cmd: list[str], env: dict[str, str], out: Path) -> None:
        self.out = out
        with out.open("wb") as sink:
            # Run where the user would, beside the workdir: the banner names it relatively.
            self.proc = subprocess.Popen(
                cmd, env=env, stdout=sink, stderr=subprocess.STDOUT, cwd=out.parent
            )

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_up(self) -> None:
        wait_for(
            "fleet up's banner (or its exit)",
            lambda: BANNER_END in self.text() or self.proc.poll() is not None,
            timeout_s=600,
            interval_s=0.5,
        )
        assert self.proc.poll() is None, self.text()

    def wait_line(self, pattern: str, timeout_s: float = 300) -> re.Match[str]:
        """The first match of `pattern` in its output (fails if it exits first)."""

        def found() -> re.Match[str] | None:
            match = re.search(pattern, self.text())
            assert match or self.proc.poll() is None, f"exited without {pattern!r}:\n{self.text()}"
            return match

        match = wait_for(f"{pattern!r} in fleet up's output", found, timeout_s, 0.05)
        assert match is not None
        return match

    def started_pids(self) -> dict[str, list[int]]:
        return self.started_in(self.text())

    @staticmethod
    def started_in(output: str) -> dict[str, list[int]]:
        """name -> the pids fleet up said it started (`started NAME (pid N`, `restarted
        NAME (pid N`), in order."""
        pids: dict[str, list[int]] = {}
        for name, pid in re.findall(r"started (\S+) \(pid (\d+)", output):
            pids.setdefault(name, []).append(int(pid))
        return pids

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(180)


def left_behind(workdir: Path, timeout_s: float = 60) -> list[str]:
    """Live processes whose command line or environment names `workdir` (every process
    of the fleet, and what they started), once they had `timeout_s` to end (a SIGKILLed
    process takes a moment to go on a loaded machine)."""
    return poll(lambda: _naming(workdir), lambda left: not left, timeout_s)


def _naming(workdir: Path) -> list[str]:
    needle = str(workdir).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            named = needle in cmdline or needle in (entry / "environ").read_bytes()
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if named:  # a zombie's are empty: only live processes are found
            shown = cmdline.replace(b"\0", b" ").decode(errors="replace")[:160]
            found.append(f"{entry.name} {shown}")
    return found
