"""The health monitor: its gauges and log warnings when a test fills a work
directory past the threshold, child processes counted from /proc, stale directories."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from repo_paths import ROOT

from artfleet.runtime.health import DIR_BYTES, FINDINGS, STALE_DIRS, HealthLimits, HealthMonitor

pytestmark = pytest.mark.integration


def test_a_work_dir_filled_past_the_threshold_raises_gauge_and_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    work = tmp_path / "sessions"
    work.mkdir()
    monitor = HealthMonitor("test-fill", [str(work)], HealthLimits(max_dir_bytes=1_000_000))
    assert [f for f in monitor.check() if f.check == "dir_size"] == []
    assert FINDINGS.labels("test-fill", "dir_size", "critical")._value.get() == 0
    (work / "s1").mkdir()
    (work / "s1" / "blob").write_bytes(b"x" * 850_000)  # past 80%: a warning
    with caplog.at_level(logging.WARNING, logger="artfleet.runtime.health"):
        findings = monitor.check()
    assert [(f.check, f.severity) for f in findings] == [("dir_size", "warning")]
    assert FINDINGS.labels("test-fill", "dir_size", "warning")._value.get() == 1
    assert "near the limit" in caplog.text
    (work / "s1" / "more").write_bytes(b"x" * 300_000)  # past the limit: critical
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="artfleet.runtime.health"):
        findings = monitor.check()
    assert [(f.check, f.severity) for f in findings] == [("dir_size", "critical")]
    assert FINDINGS.labels("test-fill", "dir_size", "critical")._value.get() == 1
    assert FINDINGS.labels("test-fill", "dir_size", "warning")._value.get() == 0
    assert DIR_BYTES.labels("test-fill", str(work))._value.get() == 1_150_000
    assert "over the limit" in caplog.text and caplog.records[0].levelno == logging.ERROR


def test_stale_directories_and_child_processes(tmp_path: Path) -> None:
    work = tmp_path / "rollouts"
    (work / "old").mkdir(parents=True)
    (work / "fresh").mkdir()
    (work / "busy" / "work").mkdir(parents=True)  # its own mtime is old, its work/ is not
    hour_ago = time.time() - 7200
    for old in ("old", "busy"):
        os.utime(work / old, (hour_ago, hour_ago))
    monitor = HealthMonitor("test-stale", [str(work)], HealthLimits(max_child_processes=2))
    children = [
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(3)
    ]
    try:
        findings = {(f.check, f.severity) for f in monitor.check()}
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert ("stale_dirs", "warning") in findings
    assert ("child_processes", "critical") in findings  # 3 > 2
    assert STALE_DIRS.labels("test-stale", str(work))._value.get() == 1


async def test_the_monitor_runs_on_its_interval_and_stops(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "f").write_bytes(b"x" * 2000)
    monitor = HealthMonitor("test-loop", [str(work)], HealthLimits(interval_s=0.05))
    monitor.start()
    try:
        deadline = time.monotonic() + 30
        while DIR_BYTES.labels("test-loop", str(work))._value.get() != 2000:
            assert time.monotonic() < deadline, "the monitor never checked"
            await asyncio.sleep(0.05)
    finally:
        await monitor.stop()


def test_alert_rules_are_shipped_with_the_stack() -> None:
    import yaml

    rules = yaml.safe_load((ROOT / "prometheus" / "rules" / "health.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    assert any("artfleet_health_findings" in e for e in exprs)
    config = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())
    assert "/etc/prometheus/rules/*.yml" in config["rule_files"]
    assert (
        "COPY prometheus/rules/ /etc/prometheus/rules/"
        in (ROOT / "prometheus" / "Dockerfile").read_text()
    )


def test_store_dirs_are_sized_but_never_stale(tmp_path: Path) -> None:
    store, work = tmp_path / "checkpoints", tmp_path / "sessions"
    (store / "0001").mkdir(parents=True)
    (store / "0001" / "adapter").write_bytes(b"x" * 1000)
    work.mkdir()
    old = time.time() - 7200
    os.utime(store / "0001", (old, old))
    os.utime(store / "0001" / "adapter", (old, old))
    monitor = HealthMonitor("test-store", [], HealthLimits(min_free_bytes=0), [str(store)])
    monitor.watch(str(work), str(work), "")  # known later (the sandbox's root), once
    assert monitor.work_dirs == [work]
    assert monitor.check() == []
    assert DIR_BYTES.labels("test-store", str(store))._value.get() == 1000
    assert STALE_DIRS.labels("test-store", str(work))._value.get() == 0


def test_health_settings_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from artfleet_rollout.settings import RolloutSettings

    monkeypatch.setenv("ARTFLEET_API_TOKEN", "a-real-token-1234")
    monkeypatch.setenv("ARTFLEET_HEALTH_MAX_DIR_BYTES", "5000")
    monkeypatch.setenv("ARTFLEET_HEALTH_WORK_DIRS", '["/srv/rollouts"]')
    settings = RolloutSettings()  # type: ignore[call-arg]  # from the environment
    monitor = HealthMonitor.for_service("rollout", settings)
    assert monitor.limits.max_dir_bytes == 5000 and monitor.limits.interval_s == 60
    assert monitor.work_dirs == [Path("/srv/rollouts")]
    monkeypatch.setenv("ARTFLEET_HEALTH_WARN_FRACTION", "2")
    with pytest.raises(ValueError, match="health_warn_fraction"):
        RolloutSettings()  # type: ignore[call-arg]
