"""Logging with the request id of the RPC being served on every line, and repeated records
rate-limited (a flood of one message cannot fill a disk)."""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

# Records of one logger and message template let through per window; the rest of the
# window are counted, and their count is logged once the window is over.
REPEAT_BURST = 20
REPEAT_WINDOW_S = 10.0
_SWEEP_EVERY_S = 1.0  # how often ended windows of other templates are summed up
_SUMMARY = "repeat_summary"  # set on the summary records (they pass the filter)


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


@dataclass
class _Window:
    start: float
    level: int
    count: int = 0
    suppressed: int = 0


class RepeatLimiter(logging.Filter):
    """Lets `burst` records of each (logger, message template) through per `window_s`
    and drops the rest of that window, counted: once the window is over, a record
    "N similar records suppressed" goes to `emit` (the handler), before the next record of
    that template or of any other (ended windows are checked at most every second).

    The template is the record's unformatted message, so "no answer from %s" with a
    thousand hosts is one template; the key has no level, the summary takes the last's."""

    def __init__(
        self,
        emit: Callable[[logging.LogRecord], object],
        burst: int = REPEAT_BURST,
        window_s: float = REPEAT_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._emit = emit
        self._burst = burst
        self._window_s = window_s
        self._clock = clock
        self._windows: dict[tuple[str, str], _Window] = {}
        self._next_sweep = 0.0
        self._lock = threading.Lock()  # records come from several threads

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _SUMMARY, False):
            return True
        now = self._clock()
        key = (record.name, str(record.msg))
        with self._lock:
            summaries = self._ended(now, key)
            window = self._windows.get(key)
            if window is None:
                window = self._windows[key] = _Window(now, record.levelno)
            window.count += 1
            window.level = record.levelno
            allowed = window.count <= self._burst
            if not allowed:
                window.suppressed += 1
        for summary in summaries:  # outside the lock: emitting comes back through filter()
            self._emit(summary)
        return allowed

    def _ended(self, now: float, key: tuple[str, str]) -> list[logging.LogRecord]:
        """Summaries of the windows that are over (`key`'s always, the others' at most
        every _SWEEP_EVERY_S), which are dropped. Called with the lock held."""
        keys = [key] if key in self._windows else []
        if now >= self._next_sweep:
            self._next_sweep = now + _SWEEP_EVERY_S
            keys = list(self._windows)
        summaries = []
        for name, template in keys:
            window = self._windows[(name, template)]
            if now - window.start < self._window_s:
                continue
            del self._windows[(name, template)]
            if window.suppressed:
                summaries.append(self._summary(name, template, window, now))
        return summaries

    def _summary(self, name: str, template: str, window: _Window, now: float) -> logging.LogRecord:
        shown = template if len(template) <= 200 else template[:200] + "..."
        record = logging.LogRecord(
            name,
            window.level,
            __file__,
            0,
            "%d similar records suppressed in %.0fs (after the first %d): %r",
            (window.suppressed, now - window.start, self._burst, shown),
            None,
        )
        setattr(record, _SUMMARY, True)
        return record


def setup_logging(level: str = "INFO", service: str = "artfleet") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RequestIdFilter())
    handler.addFilter(RepeatLimiter(handler.handle))
    handler.setFormatter(
        logging.Formatter(
            f"%(asctime)s %(levelname)s {service} [%(request_id)s] %(name)s: %(message)s"
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Chatty libraries: keep their warnings, drop their debug/info noise.
    for name in ("httpx", "urllib3", "LiteLLM", "litellm", "weave"):
        logging.getLogger(name).setLevel(logging.WARNING)
