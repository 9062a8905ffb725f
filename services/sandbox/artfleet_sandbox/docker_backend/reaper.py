"""Which managed containers to remove, decided from their labels (pure, no I/O).

Each replica reaps its own sessions by idle TTL and max lifetime from its session table.
From labels it also removes containers of owners that no longer exist: another replica
whose container is gone or stopped, its own previous incarnation (same container, new
replica id), or a process on this host that has exited. It never touches containers of
another deployment or without our labels (the engine query filters on both).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping

from artfleet_sandbox.docker_backend import config as c
from artfleet_sandbox.docker_backend.engine import ManagedContainer
from artfleet_sandbox.replica import ReplicaIdentity

# An untracked container of our own is only stale once it is this old: a session closing
# or a container being created while the reaper looks must never count as stale.
STALE_AFTER_S = 30.0


def owner_containers(containers: Collection[ManagedContainer], me: ReplicaIdentity) -> set[str]:
    """Container ids of other replicas' owners, whose state the caller must look up."""
    return {
        owner
        for item in containers
        if item.labels.get(c.LABEL_REPLICA) != me.replica_id
        and (owner := item.labels.get(c.LABEL_REPLICA_CONTAINER, ""))
        and owner != me.container_id
    }


def reap_reason(
    item: ManagedContainer,
    me: ReplicaIdentity,
    tracked: Collection[str],
    owners_running: Mapping[str, bool],
) -> str | None:
    """ "orphan", "stale" or None (keep). `tracked`: session ids this replica knows of,
    including containers being created and those waiting in the pool."""
    labels = item.labels
    if labels.get(c.LABEL_REPLICA) == me.replica_id:
        if labels.get(c.LABEL_SESSION) in tracked:
            return None
        created = labels.get(c.LABEL_CREATED_AT, "")
        young = created.isdigit() and time.time() - int(created) < STALE_AFTER_S
        return None if young else "stale"
    owner = labels.get(c.LABEL_REPLICA_CONTAINER, "")
    if owner:
        if owner == me.container_id:
            return "orphan"  # this container's previous replica: it restarted
        # An owner we could not look up counts as running: never reap on a guess.
        return None if owners_running.get(owner, True) else "orphan"
    if labels.get(c.LABEL_REPLICA_HOST) == me.host and not me.container_id:
        pid = labels.get(c.LABEL_REPLICA_PID, "")
        alive = pid.isdigit() and me.process_alive_here(
            int(pid), labels.get(c.LABEL_REPLICA_START, "")
        )
        return None if alive else "orphan"
    return None  # an owner elsewhere that we cannot check
