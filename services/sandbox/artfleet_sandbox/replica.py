"""Who this replica is: the id that prefixes its session ids, and how others tell it is gone.

Sticky sessions work by naming: a session id is `<replica id>.<random>`, so any replica
can tell a call that is not for it (the client misrouted it, or this replica restarted
and lost the session) and answer UNAVAILABLE instead of a confusing NOT_FOUND. Clients
pin each session to the address that created it (`artfleet.clients.sandbox`).

The replica id is new at every start. Containers carry the owner's identity as labels:
the id, and either the Docker container the replica runs in or its host, pid and pid
start time, so a reaper elsewhere can tell when the owner no longer exists.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
from dataclasses import dataclass

_SESSION_ID = re.compile(r"^(r[0-9a-f]{8})\.[0-9a-f]{32}$")
_CONTAINER_IN_MOUNTINFO = re.compile(r"/containers/([0-9a-f]{64})/")


def new_replica_id() -> str:
    return "r" + secrets.token_hex(4)


def new_session_id(replica_id: str) -> str:
    # 128 random bits: the id is the only handle on a session, so it must be unguessable.
    return f"{replica_id}.{secrets.token_hex(16)}"


def replica_of(session_id: str) -> str | None:
    """The replica a well-formed session id names, else None."""
    match = _SESSION_ID.match(session_id)
    return match.group(1) if match else None


def own_container_id(mountinfo_path: str = "/proc/self/mountinfo") -> str:
    """The Docker container this process runs in, or "" outside Docker.

    Docker bind-mounts `/var/lib/docker/containers/<id>/hostname` (and resolv.conf) into
    every container; the hostname alone is not enough, since compose users may set it.
    """
    try:
        with open(mountinfo_path, encoding="utf-8") as handle:
            match = _CONTAINER_IN_MOUNTINFO.search(handle.read())
    except OSError:
        return ""
    return match.group(1) if match else ""


def process_start_ticks(pid: int) -> str:
    """The start time of `pid` in clock ticks since boot ("" when there is no such pid).

    Together with the pid it names one process for the host's uptime: a reused pid
    has another start time.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            stat = handle.read()
    except OSError:
        return ""
    # Field 22; the command name (field 2) may hold spaces, so split after its ')'.
    return stat.rsplit(")", 1)[1].split()[19]


@dataclass(frozen=True)
class ReplicaIdentity:
    replica_id: str
    container_id: str  # "" outside Docker
    host: str
    pid: int
    start_ticks: str

    @classmethod
    def current(cls, replica_id: str = "", container_id: str | None = None) -> ReplicaIdentity:
        pid = os.getpid()
        return cls(
            replica_id=replica_id or new_replica_id(),
            container_id=own_container_id() if container_id is None else container_id,
            host=socket.gethostname(),
            pid=pid,
            start_ticks=process_start_ticks(pid),
        )

    def process_alive_here(self, pid: int, start_ticks: str) -> bool:
        """Whether a process of this host with this pid and start time still runs."""
        return bool(start_ticks) and process_start_ticks(pid) == start_ticks
