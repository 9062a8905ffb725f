"""Local backend directories left behind by a replica that died without its `stop()`.

Each local backend's own dir (`artfleet-sandbox-*` under the workspace root) holds an
owner file naming the replica and its process: host, pid and the pid's start time. A
replica starting removes the dirs under its parent whose owner process no longer runs on
this host (a SIGKILLed or OOM-killed replica, a crashed container), and nothing else: a
dir of a live replica, of another host (a shared volume), or without an owner file (one
being made right now, or not ours to judge) stays.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path

from artfleet_sandbox.paths import remove_tree
from artfleet_sandbox.replica import ReplicaIdentity

log = logging.getLogger(__name__)

PREFIX = "artfleet-sandbox-"
OWNER_FILE = ".owner.json"


def write_owner(root: str, me: ReplicaIdentity) -> None:
    """Names `me` as the owner of `root` (atomically: a reader sees all or nothing)."""
    record = {"replica": me.replica_id, "host": me.host, "pid": me.pid, "start": me.start_ticks}
    partial = os.path.join(root, f"{OWNER_FILE}.tmp")
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(record, handle)
    os.chmod(partial, 0o644)
    os.replace(partial, os.path.join(root, OWNER_FILE))


def _owner(root: Path) -> dict[str, object] | None:
    try:
        record = json.loads((root / OWNER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def is_stale(root: Path, me: ReplicaIdentity) -> bool:
    """Whether `root`'s owner is a process of this host that no longer runs."""
    record = _owner(root)
    if record is None or record.get("host") != me.host:
        return False
    pid, start = record.get("pid"), record.get("start")
    if not isinstance(pid, int) or not isinstance(start, str) or not start:
        return False
    if pid == me.pid and start == me.start_ticks:
        return False  # our own
    return not me.process_alive_here(pid, start)


def remove_stale(parent: str, me: ReplicaIdentity) -> list[str]:
    """Removes the stale backend dirs directly under `parent`; returns their paths."""
    removed: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        for root in sorted(Path(parent).glob(f"{PREFIX}*")):
            if not root.is_dir() or root.is_symlink() or not is_stale(root, me):
                continue
            try:
                remove_tree(str(root))
            except OSError as exc:  # not ours to remove after all (permissions): keep going
                log.warning("stale sandbox dir %s not removed: %s", root, exc)
                continue
            removed.append(str(root))
            log.info("removed %s: its replica's process is gone", root)
    return removed
