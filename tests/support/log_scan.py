"""Find secrets in what a fleet wrote: every log-like file under a directory."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

LOG_SUFFIXES = {".log", ".jsonl", ".txt", ".out", ".err"}
MAX_BYTES = 256 * 1024 * 1024


def log_files(root: Path) -> list[Path]:
    """Files under `root` that are logs: in a `logs` dir, or named like one."""
    found = []
    for path in root.rglob("*"):
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            continue
        if "logs" in path.parts[len(root.parts) :] or path.suffix in LOG_SUFFIXES:
            found.append(path)
    return sorted(found)


def leaked_secrets(root: Path, secrets: Mapping[str, str]) -> list[str]:
    """'<file>: <name>' for each secret (name -> value) found in a log under `root`."""
    wanted = {name: value.encode() for name, value in secrets.items() if value}
    leaks = []
    for path in log_files(root):
        data = path.read_bytes()
        leaks += [f"{path}: {name}" for name, value in wanted.items() if value in data]
    return leaks
