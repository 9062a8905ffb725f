"""What a session container looks like: options for the Docker SDK, built without I/O."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from docker.types import Mount

from artfleet_sandbox.backend import Forbidden, InvalidArgument, Resources
from artfleet_sandbox.docker_backend import config as c
from artfleet_sandbox.replica import ReplicaIdentity


@dataclass(frozen=True)
class ContainerRequest:
    session_id: str
    image: str
    resources: Resources  # complete: no zeros left (see `effective_resources`)
    network: bool
    job_id: str = ""
    pooled: bool = False


def effective_resources(asked: Resources, defaults: Resources, caps: Resources) -> Resources:
    """Zeros become the deployment defaults; anything above a cap is clamped to it."""
    for name in ("memory_bytes", "cpus", "pids", "tmp_bytes"):
        if getattr(asked, name) < 0:
            raise InvalidArgument(f"resources.{name} must not be negative")

    def pick(name: str) -> Any:
        value = getattr(asked, name) or getattr(defaults, name)
        return min(value, getattr(caps, name))

    return Resources(
        memory_bytes=pick("memory_bytes"),
        cpus=pick("cpus"),
        pids=pick("pids"),
        tmp_bytes=pick("tmp_bytes"),
    )


def check_network(network: bool, cfg: c.DockerConfig) -> None:
    if network and not cfg.allow_network:
        raise Forbidden("network access is disabled for sandboxes on this deployment")


def owner_labels(cfg: c.DockerConfig, who: ReplicaIdentity) -> dict[str, str]:
    return {
        c.LABEL_MANAGED: "sandbox",
        c.LABEL_DEPLOYMENT: cfg.deployment,
        c.LABEL_REPLICA: who.replica_id,
        c.LABEL_REPLICA_CONTAINER: who.container_id,
        c.LABEL_REPLICA_HOST: who.host,
        c.LABEL_REPLICA_PID: str(who.pid),
        c.LABEL_REPLICA_START: who.start_ticks,
    }


def container_options(
    req: ContainerRequest, cfg: c.DockerConfig, who: ReplicaIdentity
) -> dict[str, Any]:
    """Keyword arguments of `client.containers.create` for one session container."""
    res = req.resources
    labels = owner_labels(cfg, who) | {
        c.LABEL_SESSION: req.session_id,
        c.LABEL_JOB: req.job_id,
        c.LABEL_POOL: "1" if req.pooled else "",
        c.LABEL_CREATED_AT: str(int(time.time())),
    }
    return {
        "image": req.image,
        # docker-init (tini) reaps orphans; the idle `sleep` is all the container runs
        # until a command arrives through exec.
        "command": ["sleep", "infinity"],
        "init": True,
        "user": cfg.init_user,
        "labels": labels,
        "detach": True,
        "network_mode": cfg.network if req.network else "none",
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "mem_limit": res.memory_bytes,
        "memswap_limit": res.memory_bytes,  # equal: no swap on top of the memory limit
        "nano_cpus": int(res.cpus * 1e9),
        "pids_limit": res.pids,
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={res.tmp_bytes},mode=1777"},
        # An anonymous volume: removed with the container (`remove(v=True)`).
        "mounts": [Mount(target=c.WORKSPACE, source=None, type="volume")],
        "working_dir": c.WORKSPACE,
        "environment": {"HOME": c.WORKSPACE, "TMPDIR": "/tmp", "LANG": "C.UTF-8"},
        "ipc_mode": "private",
        "hostname": "sandbox",
    }
