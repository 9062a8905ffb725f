"""The time per test area at the end of a run, beside each area's budget.

An area is a folder under `tests/integration` (fleet, inference, ...) or `unit` for every
unit test. A test's time is its setup, call and teardown together, so a module's fleet
start counts in its area. The budgets live once, in the table of `docs/testing.md`
(`| area | budget (s) | ...`); this plugin reads them there. Over budget is reported,
never failed: a run's time depends on the machine's load, a test's result must not.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

BUDGET_ROW = re.compile(r"^\|\s*`?([a-z_-]+)`?\s*\|\s*(\d+)\s*\|")


def area_of(nodeid: str) -> str:
    """`tests/integration/fleet/test_x.py::t` is `fleet`; anything under tests/unit is `unit`;
    the e2e helpers and other roots keep their first folder."""
    parts = nodeid.split("::", 1)[0].split("/")
    if parts and parts[0] == "tests":
        parts = parts[1:]
    if len(parts) >= 3 and parts[0] == "integration":
        return parts[1]
    return parts[0] if len(parts) > 1 else "other"


def read_budgets(doc: Path) -> dict[str, int]:
    """The `| area | seconds |` rows of the budget table; empty when the doc is missing."""
    if not doc.is_file():
        return {}
    budgets: dict[str, int] = {}
    for line in doc.read_text().splitlines():
        match = BUDGET_ROW.match(line)
        if match:
            budgets[match.group(1)] = int(match.group(2))
    return budgets


def area_table(seconds: dict[str, float], budgets: dict[str, int]) -> list[str]:
    """Rows for the terminal: busiest area first, the total last."""
    rows = [f"{'area':<12} {'seconds':>8} {'budget':>7}"]
    for area, spent in sorted(seconds.items(), key=lambda kv: -kv[1]):
        budget = budgets.get(area)
        mark = "" if budget is None or spent <= budget else "  over budget"
        shown = "-" if budget is None else str(budget)
        rows.append(f"{area:<12} {spent:>8.0f} {shown:>7}{mark}")
    total_budget = sum(budgets.get(a, 0) for a in seconds)
    rows.append(f"{'total':<12} {sum(seconds.values()):>8.0f} {total_budget:>7}")
    return rows


@dataclass
class WorkerSpan:
    """One xdist worker's tests: the time they took, from its first start to its last end."""

    busy: float = 0.0
    first: float = float("inf")
    last: float = 0.0

    def add(self, report: pytest.TestReport) -> None:
        self.busy += report.duration
        self.first = min(self.first, report.start)
        self.last = max(self.last, report.stop)


def worker_rows(spans: dict[str, WorkerSpan]) -> list[str]:
    """How evenly the workers were loaded: each one's busy time and when it finished."""
    if not spans:
        return []
    start = min(span.first for span in spans.values())
    return [
        f"{name}: tests {span.busy:.0f} s, done {span.last - start:.0f} s after the first start"
        for name, span in sorted(spans.items())
    ]


class AreaTimes:
    """Sums each test's phases by area (on the controller too, under xdist: the workers'
    reports reach it through the same hook), and each xdist worker's share."""

    def __init__(self, doc: Path) -> None:
        self._doc = doc
        self.seconds: dict[str, float] = defaultdict(float)
        self.workers: dict[str, WorkerSpan] = defaultdict(WorkerSpan)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[area_of(report.nodeid)] += report.duration
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        if gateway is not None:  # a worker's report, forwarded by xdist
            self.workers[gateway.id].add(report)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        terminalreporter.write_sep("=", "time per test area (budgets: docs/testing.md)")
        for row in area_table(dict(self.seconds), read_budgets(self._doc)):
            terminalreporter.write_line(row)
        for row in worker_rows(dict(self.workers)):
            terminalreporter.write_line(row)
