"""The local fleet's logs are size-bounded: each process's output goes through the CLI into
logs/<name>.log, rotated with a few backups (artfleet_cli.logfiles)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from artfleet_cli.fleet import LocalFleet, ServiceExited
from artfleet_cli.logfiles import LOG_BACKUPS, RotatingLog


def _files(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + "*"))


def test_rotation_bounds_the_files_and_keeps_lines_whole(tmp_path: Path) -> None:
    path = tmp_path / "rollout.log"
    log = RotatingLog(path, max_bytes=10_000, backups=3)
    lines = [f"2026-01-01 INFO rollout: record {i}\n".encode() for i in range(20_000)]
    for start in range(0, len(lines), 37):  # chunks that end mid-record, as a pipe gives
        log.write(b"".join(lines[start : start + 37])[:-5])
        log.write(b"".join(lines[start : start + 37])[-5:])
    log.close()
    files = _files(path)
    assert [f.name for f in files] == [f"rollout.log{s}" for s in ("", ".1", ".2", ".3")]
    assert all(f.stat().st_size <= 10_000 for f in files)
    for backup in files[1:]:
        assert backup.read_bytes().endswith(b"\n")  # cut between records
    newest = [path.with_name("rollout.log.1"), path]
    kept = b"".join(p.read_bytes() for p in newest).splitlines()
    assert kept[-1] == b"2026-01-01 INFO rollout: record 19999"
    assert all(line.startswith(b"2026-01-01 INFO rollout: record ") for line in kept)


def test_a_line_longer_than_a_file_is_cut_and_a_restart_appends(tmp_path: Path) -> None:
    path = tmp_path / "trainer.log"
    path.write_bytes(b"before the restart\n")
    log = RotatingLog(path, max_bytes=100, backups=3)
    log.write(b"x" * 250 + b"\n")
    log.close()
    # .log, then .log.1 (the newest backup) to .log.3: what was there before, kept whole.
    assert [f.stat().st_size for f in _files(path)] == [51, 100, 100, 19]
    assert path.with_name("trainer.log.3").read_bytes() == b"before the restart\n"


def test_a_flooding_service_fills_a_few_bounded_files(tmp_path: Path) -> None:
    fleet = LocalFleet(tmp_path, log_max_bytes=50_000)
    (tmp_path / "logs").mkdir()
    flood = "for i in range(100_000): print('noisy line', i)\nraise SystemExit('the end')"
    fleet._spawn("noisy", [sys.executable, "-c", flood], dict(os.environ))
    process = fleet.processes[0]
    process.proc.wait(60)
    with pytest.raises(ServiceExited) as info:  # its last words reach the user
        fleet._check_alive(process)
    assert "the end" in info.value.tail
    fleet.stop()
    files = _files(tmp_path / "logs" / "noisy.log")
    assert len(files) == LOG_BACKUPS + 1
    assert all(f.stat().st_size <= 50_000 for f in files)
    assert b"noisy line 99999\n" in (tmp_path / "logs" / "noisy.log").read_bytes()
