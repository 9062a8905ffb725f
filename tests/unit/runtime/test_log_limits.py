"""Repeated log records are rate-limited with a count (artfleet.runtime.logs.RepeatLimiter),
in every service's logging (setup_logging)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from artfleet.runtime.logs import REPEAT_BURST, REPEAT_WINDOW_S, RepeatLimiter, setup_logging


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _logger(burst: int = 5, window_s: float = 10.0) -> tuple[logging.Logger, io.StringIO, Clock]:
    """A logger of its own whose handler writes "LEVEL name: message" lines to a buffer
    through a limiter on a clock the test moves."""
    out, clock = io.StringIO(), Clock()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RepeatLimiter(handler.handle, burst=burst, window_s=window_s, clock=clock))
    logger = logging.getLogger(f"limits-test-{id(out)}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, out, clock


def _raise() -> None:
    raise ValueError("Invalid JSON: expected value at line 1 column 1")


def test_a_flood_of_identical_records_yields_a_bounded_count_and_a_summary() -> None:
    logger, out, clock = _logger(burst=5)
    for i in range(10_000):
        try:
            _raise()
        except ValueError:
            # The MCP SDK's line per bad stdout line: a traceback each.
            logger.exception("Failed to parse JSONRPC message from server (line %d)", i)
    flooded = out.getvalue()
    assert flooded.count("Failed to parse") == 5
    assert flooded.count("Traceback") == 5
    assert "suppressed" not in flooded  # the window is not over yet
    clock.now += 10.0
    logger.error("Failed to parse JSONRPC message from server (line %d)", 10_000)
    lines = out.getvalue().splitlines()
    summary = next(line for line in lines if "suppressed" in line)
    assert summary.startswith(f"ERROR {logger.name}: 9995 similar records suppressed in 10s")
    assert "Failed to parse JSONRPC message from server (line %d)" in summary
    assert lines[-1].endswith("(line 10000)")  # the summary comes before the next one
    assert len(out.getvalue()) < 5_000


def test_a_steady_flood_lets_a_burst_through_per_window() -> None:
    logger, out, clock = _logger(burst=3, window_s=1.0)
    for i in range(10_000):  # 10 s at 1,000 records a second
        clock.now += 0.001
        logger.warning("no answer from %s", f"host-{i}")
    clock.now += 1.0
    logger.info("done")  # sums up the last window
    lines = out.getvalue().splitlines()
    kept = [line for line in lines if "no answer from host-" in line]
    summaries = [line for line in lines if "similar records suppressed" in line]
    assert len(kept) == 30 and len(summaries) == 10
    # Every record is either shown or counted.
    assert sum(int(s.split(": ", 1)[1].split()[0]) for s in summaries) + len(kept) == 10_000


def test_other_templates_and_loggers_are_not_held_back_by_a_flood() -> None:
    logger, out, _ = _logger(burst=2)
    for _ in range(100):
        logger.info("flood")
    logger.info("something else")
    child = logger.getChild("child")  # another logger, the same template
    child.handlers[:], child.propagate = logger.handlers, False
    child.info("flood")
    text = out.getvalue()
    assert text.count(": flood") == 3 and "something else" in text


def test_an_ended_window_is_summed_up_at_the_next_record_of_any_template() -> None:
    logger, out, clock = _logger(burst=1)
    for _ in range(50):
        logger.warning("flood")
    clock.now += 11.0
    logger.info("the flood is over")
    lines = out.getvalue().splitlines()
    summary = "49 similar records suppressed in 11s (after the first 1): 'flood'"
    assert lines[-2] == f"WARNING {logger.name}: {summary}"
    assert lines[-1].endswith("the flood is over")


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_every_service_logs_through_the_limiter(
    root_logging: None, capsys: pytest.CaptureFixture[str]
) -> None:
    setup_logging("INFO", "rollout")
    log = logging.getLogger("artfleet.test.flood")
    for _ in range(10_000):
        log.warning("the same line")
    err = capsys.readouterr().err
    assert err.count("the same line") == REPEAT_BURST
    assert REPEAT_WINDOW_S <= 60  # a flood's count shows within a minute
