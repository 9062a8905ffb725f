"""Which `artfleet-sandbox-*` directories a starting local replica removes: only those
whose owner file names a process of this host that no longer runs (a SIGKILLed replica;
a reused pid has another start time), never a live one's, another host's, or one it
cannot judge. Real processes' pids and start times; the end to end case with real
sandbox servers is tests/integration/sandbox/test_sandbox_owner_leases.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

from artfleet_sandbox.local_backend.stale import OWNER_FILE, remove_stale, write_owner
from artfleet_sandbox.replica import ReplicaIdentity, process_start_ticks


def _owned(parent: Path, name: str, record: object) -> Path:
    root = parent / f"artfleet-sandbox-{name}"
    (root / "s-session" / "work").mkdir(parents=True)
    (root / OWNER_FILE).write_text(json.dumps(record))
    return root


def test_only_dead_owners_of_this_host_are_removed(tmp_path: Path) -> None:
    me = ReplicaIdentity.current("rme", container_id="")
    parent_pid = os.getppid()
    alive = {"host": me.host, "pid": parent_pid, "start": process_start_ticks(parent_pid)}
    dead = {"host": me.host, "pid": parent_pid, "start": "1"}  # the pid was reused since
    removed = _owned(tmp_path, "dead", dead)
    kept = [
        _owned(tmp_path, "alive", alive),
        _owned(tmp_path, "elsewhere", dead | {"host": "another-host"}),
        _owned(tmp_path, "garbage", ["not", "a", "record"]),
        _owned(tmp_path, "no-pid", {"host": me.host, "start": "1"}),
    ]
    unowned = tmp_path / "artfleet-sandbox-new"  # being made right now: no owner file yet
    unowned.mkdir()
    not_a_dir = tmp_path / "artfleet-sandbox-file"
    not_a_dir.write_text("x")

    assert remove_stale(str(tmp_path), me) == [str(removed)]
    assert not removed.exists()
    assert all(p.exists() for p in [*kept, unowned, not_a_dir])


def test_our_own_directory_is_never_stale(tmp_path: Path) -> None:
    me = ReplicaIdentity.current("rme", container_id="")
    root = tmp_path / "artfleet-sandbox-mine"
    root.mkdir()
    write_owner(str(root), me)
    assert json.loads((root / OWNER_FILE).read_text())["replica"] == "rme"
    assert remove_stale(str(tmp_path), me) == []
    assert remove_stale(str(tmp_path / "missing"), me) == []
