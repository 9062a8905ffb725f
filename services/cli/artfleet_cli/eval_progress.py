"""`artfleet eval run` while it runs: its progress (a line per finished task on stderr when
its output is not a terminal, a bar on a terminal), and its stop on SIGINT or SIGTERM,
which ends the wait for tasks so that what finished is kept (written as partial results)."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType, TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from artfleet.contracts import evaluation
from artfleet.v1 import rollout_pb2

PARTIAL_FILE = "partial.json"


class Stopped(Exception):
    """Raised in the main thread by SIGINT or SIGTERM while tasks run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + signum  # the shell's code for a death by that signal


@contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise Stopped inside (the previous handlers come back after).
    Only the main thread can take signals: elsewhere (a test's thread) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def task_note(scenario: str, response: rollout_pb2.RunGroupResponse) -> str:
    """One finished task: its samples back and successes, or why none came back."""
    result = evaluation.task_result(scenario, response.group)
    asked = result.samples + len(response.group.exceptions)
    note = f"{scenario}: {result.samples}/{asked} samples"
    if result.samples:
        return f"{note}, {result.successes} succeeded"
    errors = response.group.exceptions
    return f"{note} ({errors[0].type}: {errors[0].message})" if errors else note


class TaskProgress:
    """A line per finished task (`eval: 3/20 tasks · t3: 4/4 samples ... · 41s`) on stderr
    when stdout is not a terminal (a file, a pipe: nothing else shows it is alive); a
    transient bar on a terminal."""

    def __init__(self, total: int, interactive: bool | None = None) -> None:
        self.total = total
        self.finished = 0
        self._started = time.monotonic()
        tty = sys.stdout.isatty() if interactive is None else interactive
        self._bar: Progress | None = None
        if tty:
            self._bar = Progress(
                TextColumn("eval"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._task = self._bar.add_task("tasks", total=total)

    def __enter__(self) -> TaskProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def done(self, scenario: str, response: rollout_pb2.RunGroupResponse) -> None:
        self.finished += 1
        if self._bar is not None:
            self._bar.advance(self._task)
            return
        elapsed = time.monotonic() - self._started
        line = f"eval: {self.finished}/{self.total} tasks · {task_note(scenario, response)}"
        print(f"{line} · {elapsed:.0f}s", file=sys.stderr, flush=True)


def mark_partial(out: Path, stopped: Stopped, done: list[str], not_done: list[str]) -> None:
    """partial.json beside summary.json: the evaluation was stopped, these tasks are in it
    (summary.json), these are not."""
    record = {
        "partial": True,
        "stopped_by": stopped.signal_name,
        "tasks_done": len(done),
        "tasks_total": len(done) + len(not_done),
        "not_done": not_done,
    }
    (out / PARTIAL_FILE).write_text(json.dumps(record, indent=2) + "\n")


def partial_note(path: Path) -> str | None:
    """What partial.json says of an evaluation's folder, in a line; None when whole."""
    folder = path if path.is_dir() else path.parent
    try:
        record = json.loads((folder / PARTIAL_FILE).read_text())
    except (OSError, ValueError):
        return None
    done, total = record.get("tasks_done", "?"), record.get("tasks_total", "?")
    return f"{path} is partial: {done} of {total} tasks (stopped by {record.get('stopped_by')})"
