"""A service's health monitor (seed 001's HealthMonitor): on an interval it checks its
child processes against a limit, the free space of /tmp and of its work directories,
their size against a limit, and stale session/rollout directories (untouched for an
hour). Findings become Prometheus gauges and log warnings; a critical finding is logged
as an error and never stops the service (training goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Gauge
from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

CHILDREN = Gauge("artfleet_health_child_processes", "Child processes of the service", ["service"])
FREE_BYTES = Gauge(
    "artfleet_health_free_bytes", "Free space of a checked path", ["service", "path"]
)
DIR_BYTES = Gauge("artfleet_health_dir_bytes", "Size of a work directory", ["service", "path"])
STALE_DIRS = Gauge(
    "artfleet_health_stale_dirs",
    "Entries of a work directory untouched for long",
    ["service", "path"],
)
FINDINGS = Gauge(
    "artfleet_health_findings",
    "Current health findings (1 while a check is over its limit)",
    ["service", "check", "severity"],
)
CHECKS = ("child_processes", "free_space", "dir_size", "stale_dirs")


class HealthLimits(BaseModel):
    interval_s: float = Field(default=60.0, gt=0)
    max_child_processes: int = Field(default=256, ge=1)
    min_free_bytes: int = Field(default=1 << 30, ge=0)  # per checked path
    max_dir_bytes: int = Field(default=0, ge=0)  # per work directory; 0 = no limit
    stale_after_s: float = Field(default=3600.0, gt=0)
    warn_fraction: float = Field(default=0.8, gt=0, le=1)  # warn at 80% of a limit


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str  # "warning" | "critical"
    message: str


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path, onerror=lambda _e: None):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def child_count(pid: int) -> int:
    """Descendants of `pid`, from /proc (each process's parent is field 4 of its stat)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    count, frontier = 0, {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        count += len(frontier)
    return count


class HealthMonitor:
    def __init__(
        self, service: str, work_dirs: Sequence[str], limits: HealthLimits | None = None
    ) -> None:
        self.service = service
        self.work_dirs = [Path(d) for d in work_dirs]
        self.limits = limits or HealthLimits()
        self._task: asyncio.Task[None] | None = None

    def check(self) -> list[Finding]:
        """One round of checks (blocking: file system walks); sets the gauges."""
        findings = [*self._children(), *self._space(), *self._dirs()]
        for check in CHECKS:
            for severity in ("warning", "critical"):
                hit = any(f.check == check and f.severity == severity for f in findings)
                FINDINGS.labels(self.service, check, severity).set(1 if hit else 0)
        for f in findings:
            log.log(
                logging.ERROR if f.severity == "critical" else logging.WARNING,
                "health (%s): %s",
                self.service,
                f.message,
            )
        return findings

    def _grade(self, check: str, value: float, limit: float, what: str) -> list[Finding]:
        if value > limit:
            return [Finding(check, "critical", f"{what}: {value:.0f} over the limit {limit:.0f}")]
        if value > self.limits.warn_fraction * limit:
            return [Finding(check, "warning", f"{what}: {value:.0f} near the limit {limit:.0f}")]
        return []

    def _children(self) -> list[Finding]:
        count = child_count(os.getpid())
        CHILDREN.labels(self.service).set(count)
        return self._grade(
            "child_processes", count, self.limits.max_child_processes, "child processes"
        )

    def _space(self) -> list[Finding]:
        findings = []
        for path in {Path("/tmp"), *self.work_dirs}:
            if not path.exists():
                continue
            free = shutil.disk_usage(path).free
            FREE_BYTES.labels(self.service, str(path)).set(free)
            if free < self.limits.min_free_bytes:
                findings.append(
                    Finding(
                        "free_space",
                        "critical",
                        f"{path}: {free} bytes free, under {self.limits.min_free_bytes}",
                    )
                )
        return findings

    def _dirs(self) -> list[Finding]:
        findings: list[Finding] = []
        cutoff = time.time() - self.limits.stale_after_s
        for path in self.work_dirs:
            if not path.is_dir():
                continue
            size = _dir_bytes(path)
            DIR_BYTES.labels(self.service, str(path)).set(size)
            if self.limits.max_dir_bytes:
                findings += self._grade(
                    "dir_size", size, self.limits.max_dir_bytes, f"{path} bytes"
                )
            stale = [e.name for e in path.iterdir() if e.is_dir() and e.stat().st_mtime < cutoff]
            STALE_DIRS.labels(self.service, str(path)).set(len(stale))
            if stale:
                findings.append(
                    Finding(
                        "stale_dirs",
                        "warning",
                        f"{path}: {len(stale)} entries untouched for over "
                        f"{self.limits.stale_after_s:.0f}s: {', '.join(sorted(stale)[:5])}",
                    )
                )
        return findings

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"health-{self.service}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.check)
            except Exception:  # a broken check never stops the service
                log.exception("health check failed")
            await asyncio.sleep(self.limits.interval_s)
