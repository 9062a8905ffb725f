"""A service's health monitor (the R2E-Gym training script's HealthMonitor): on an interval
it checks its child processes against a limit, the free space of /tmp and of its work directories,
their size against a limit, and stale session/rollout directories (untouched for an
hour). Findings become Prometheus gauges and log warnings; a critical finding is logged
as an error and never stops the service (training goes on).

Every service runs one (trainer, rollout, reward, sandbox, api), limits from its settings
(`HealthSettings`: `ARTFLEET_HEALTH_*`). Work directories are of two kinds: session-like
ones (`work_dirs`: each entry is a session or rollout, so one untouched for an hour is
stale) and store-like ones (`store_dirs`: checkpoints, caches, logs; old entries are the
point, so only their size and free space are checked).

`probe_policy` is the one check of the policy endpoint (the inference service, or the
trainer's own server): the API's `/health`, `fleet up`'s readiness wait and the inference
container's healthcheck all ask it, as a client of the policy would.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from prometheus_client import Gauge
from pydantic import BaseModel, Field

from artfleet.runtime.tasks import cancel_and_wait

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


def _shown(url: str) -> str:
    """The URL without user info or query: what a health detail may show."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def probe_policy(base_url: str, token: str, timeout_s: float = 3.0) -> tuple[bool, str]:
    """(ok, detail) for `GET <base_url>/models` with the fleet token, as a rollout worker
    would call the policy. The inference service's front listens only once vLLM answers,
    so a 200 here means the policy can be served; a 401 names the token."""
    url = f"{base_url.rstrip('/')}/models"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    # No proxy: the policy endpoint is inside the fleet, whatever this shell's proxy says.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            return False, f"{exc.code}: the fleet token is refused at {_shown(url)}"
        return False, f"{exc.code} {exc.reason} from {_shown(url)}"
    except (OSError, ValueError) as exc:  # refused, timed out, not a URL
        return False, f"no answer from {_shown(url)}: {getattr(exc, 'reason', exc)}"
    except http.client.HTTPException as exc:  # something else on the port (gRPC, ...)
        return False, f"{_shown(url)} does not answer HTTP/1.1: {type(exc).__name__}"
    try:
        listed = json.loads(body)["data"]
        count = len(listed)
    except (ValueError, KeyError, TypeError):
        return False, f"{_shown(url)} answered, but not with a model listing"
    return True, f"serves {count} model(s) at {_shown(url)}"


class HealthLimits(BaseModel):
    interval_s: float = Field(default=60.0, gt=0)
    max_child_processes: int = Field(default=256, ge=1)
    min_free_bytes: int = Field(default=1 << 30, ge=0)  # per checked path
    max_dir_bytes: int = Field(default=0, ge=0)  # per work directory; 0 = no limit
    stale_after_s: float = Field(default=3600.0, gt=0)
    warn_fraction: float = Field(default=0.8, gt=0, le=1)  # warn at 80% of a limit


class HealthSettings(BaseModel):
    """The monitor's part of a service's settings (mixed into `CommonSettings`, so every
    service reads `ARTFLEET_HEALTH_*`)."""

    health_interval_s: float = Field(default=60.0, gt=0, description="seconds between checks")
    health_max_child_processes: int = Field(
        default=256, ge=1, description="descendant processes before a critical finding"
    )
    health_min_free_bytes: int = Field(
        default=1 << 30, ge=0, description="free bytes under /tmp and each work dir"
    )
    health_max_dir_bytes: int = Field(
        default=0, ge=0, description="size of each work dir (0 = no limit)"
    )
    health_stale_after_s: float = Field(
        default=3600.0, gt=0, description="a session/rollout dir untouched this long is stale"
    )
    health_warn_fraction: float = Field(
        default=0.8, gt=0, le=1, description="a warning at this fraction of a limit"
    )
    health_work_dirs: list[str] = Field(
        default_factory=list,
        description="more session-like dirs to watch, besides the service's own",
    )

    def health_limits(self) -> HealthLimits:
        return HealthLimits(
            interval_s=self.health_interval_s,
            max_child_processes=self.health_max_child_processes,
            min_free_bytes=self.health_min_free_bytes,
            max_dir_bytes=self.health_max_dir_bytes,
            stale_after_s=self.health_stale_after_s,
            warn_fraction=self.health_warn_fraction,
        )


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


def _last_touched(entry: Path) -> float:
    """Newest mtime of a dir and its direct children: a session writing under its work/
    dir touches that, never the session dir itself."""
    newest = entry.stat().st_mtime
    for child in entry.iterdir():
        with contextlib.suppress(OSError):
            newest = max(newest, child.lstat().st_mtime)
    return newest


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
        self,
        service: str,
        work_dirs: Sequence[str],
        limits: HealthLimits | None = None,
        store_dirs: Sequence[str] = (),
    ) -> None:
        self.service = service
        self.work_dirs = [Path(d) for d in work_dirs if d]
        self.store_dirs = [Path(d) for d in store_dirs if d]
        self.limits = limits or HealthLimits()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    def for_service(
        cls,
        service: str,
        settings: HealthSettings,
        work_dirs: Sequence[str] = (),
        store_dirs: Sequence[str] = (),
    ) -> HealthMonitor:
        """The monitor a service runs: its own dirs plus `health_work_dirs`."""
        dirs = [*work_dirs, *settings.health_work_dirs]
        return cls(service, dirs, settings.health_limits(), store_dirs)

    def watch(self, *work_dirs: str) -> None:
        """More session-like dirs, known only once the service started (the sandbox's)."""
        for path in (Path(d) for d in work_dirs if d):
            if path not in self.work_dirs:
                self.work_dirs.append(path)

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
        for path in {Path("/tmp"), *self.work_dirs, *self.store_dirs}:
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
        for path in [*self.work_dirs, *self.store_dirs]:
            if not path.is_dir():
                continue
            size = _dir_bytes(path)
            DIR_BYTES.labels(self.service, str(path)).set(size)
            if self.limits.max_dir_bytes:
                findings += self._grade(
                    "dir_size", size, self.limits.max_dir_bytes, f"{path} bytes"
                )
        return findings + self._stale()

    def _stale(self) -> list[Finding]:
        findings: list[Finding] = []
        cutoff = time.time() - self.limits.stale_after_s
        for path in self.work_dirs:
            if not path.is_dir():
                continue
            stale = []
            for entry in path.iterdir():  # an entry removed meanwhile (a closed session) is fine
                with contextlib.suppress(OSError):
                    if entry.is_dir() and _last_touched(entry) < cutoff:
                        stale.append(entry.name)
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
            await cancel_and_wait(self._task)

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.check)
            except Exception:  # a broken check never stops the service
                log.exception("health check failed")
            await asyncio.sleep(self.limits.interval_s)
