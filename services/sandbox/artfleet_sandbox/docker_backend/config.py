"""Knobs of the docker backend and the labels it puts on what it creates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from artfleet_sandbox.backend import Resources

MiB = 1024 * 1024
GiB = 1024 * MiB

# Every container we create carries these labels; the reaper and shutdown select by them
# and never touch a container without `LABEL_MANAGED` and our deployment's name.
LABEL_MANAGED = "io.artfleet.managed"  # value: "sandbox"
LABEL_DEPLOYMENT = "io.artfleet.deployment"
LABEL_REPLICA = "io.artfleet.replica"
LABEL_REPLICA_CONTAINER = "io.artfleet.replica.container"
LABEL_REPLICA_HOST = "io.artfleet.replica.host"
LABEL_REPLICA_PID = "io.artfleet.replica.pid"
LABEL_REPLICA_START = "io.artfleet.replica.start"
LABEL_SESSION = "io.artfleet.session"
LABEL_JOB = "io.artfleet.job"  # "" for a warm-pool container until a session takes it
LABEL_POOL = "io.artfleet.pool"  # "1" while the container waits in the warm pool
LABEL_CREATED_AT = "io.artfleet.created-at"  # unix seconds

WORKSPACE = "/workspace"

DEFAULT_RESOURCES = Resources(memory_bytes=1 * GiB, cpus=1.0, pids=256, tmp_bytes=256 * MiB)
RESOURCE_CAPS = Resources(memory_bytes=8 * GiB, cpus=4.0, pids=4096, tmp_bytes=4 * GiB)


@dataclass(frozen=True)
class DockerConfig:
    """Deployment policy of the docker backend; `SandboxSettings` maps onto it."""

    deployment: str = "artfleet"
    replica_id: str = ""  # "" = a new one at every start
    docker_host: str = ""  # "" = DOCKER_HOST or the local socket
    default_image: str = "artfleet/base:bookworm"
    # Deployment defaults for a session that asks for nothing, and the caps on what a
    # session may ask for.
    defaults: Resources = DEFAULT_RESOURCES
    caps: Resources = RESOURCE_CAPS
    allow_network: bool = True  # may a session opt in to network access at all
    network: str = "bridge"  # the Docker network of sessions that opted in
    user: str = "1000:1000"  # commands run as this non-root uid:gid
    # The container's idle main process (init + sleep) runs as another uid, so a timeout
    # can SIGKILL every process of `user` (`kill -9 -1`) without ending the session.
    init_user: str = "65534:65534"
    idle_ttl_s: float = 1800.0
    max_lifetime_s: float = 4 * 3600.0
    reap_interval_s: float = 30.0
    max_sessions: int = 256
    pool_size: int = 2  # warm containers kept per image
    pool_images: Sequence[str] = ()  # pools filled at start; others get one at first use
    pool_max_age_s: float = 3600.0  # a pooled container older than this is replaced
    pool_max_images: int = 8  # task images (beyond pool_images) that keep a warm pool
    # Repos of repo tasks get pools of their own, seeded with the repo in the background
    # (keys count as task images for pool_max_images); False: every session unpacks it.
    pool_repos: bool = True
    pull: bool = False  # pull a missing image (False: it must exist on the engine)
    test_command: str = "python3 -m pytest -q --junitxml={junitxml}"
    cache_dir: str = ""  # repos prepared once per replica (repocache); "" = the default
    test_output_bytes: int = 64 * 1024
    # Past this many bytes of output (kept + dropped) a command is killed: draining
    # gigabytes costs the engine and this process real CPU for nothing.
    drain_limit_bytes: int = 64 * MiB
    threads: int = 64  # blocking Docker calls run on this many threads
    stop_timeout_s: float = 10.0
