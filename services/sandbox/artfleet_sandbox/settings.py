"""Settings of the sandbox service, read from `ARTFLEET_*` variables.

Names are chosen to read well with the prefix: `ARTFLEET_SANDBOX_BACKEND`,
`ARTFLEET_MAX_TIMEOUT_S`, `ARTFLEET_USE_BWRAP`, ...
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from artfleet.runtime.config import ServerSettings
from artfleet_sandbox.local_backend.bwrap import DEFAULT_HIDE_PATHS
from artfleet_sandbox.local_backend.config import DEFAULT_SANDBOX_PATH, DEFAULT_TEST_COMMAND

MiB = 1024 * 1024
GiB = 1024 * MiB


class SandboxSettings(ServerSettings):
    """Deployment policy of one sandbox replica; requests asking for more are clamped."""

    # auto: docker wherever an engine answers, else local (and the log says which).
    sandbox_backend: Literal["auto", "docker", "local"] = "auto"

    default_timeout_s: float = Field(default=60.0, gt=0, description="Exec/RunTests default")
    max_timeout_s: float = Field(default=600.0, gt=0, description="Longer requests are clamped")
    default_output_bytes: int = Field(default=256 * 1024, gt=0, description="Per stream")
    # Both streams travel in one reply and gRPC clients refuse replies over 4 MiB by default.
    max_output_bytes: int = Field(default=1 * MiB, gt=0, le=1900 * 1024, description="Per stream")
    max_read_bytes: int = Field(default=2 * MiB, gt=0, le=3 * MiB, description="ReadFile cap")
    test_output_bytes: int = Field(default=64 * 1024, gt=0, description="RunTests output kept")

    idle_ttl_s: float = Field(default=1800.0, gt=0, description="Idle sessions are closed")
    max_idle_ttl_s: float = Field(default=6 * 3600.0, gt=0)
    reap_interval_s: float = Field(default=30.0, gt=0)
    # Sessions created with an owner (rollout workers) close when the owner stops renewing.
    owner_lease_s: float = Field(
        default=60.0, gt=0, description="Owner lease when a request asks for none"
    )
    min_owner_lease_s: float = Field(default=1.0, gt=0, description="Shorter requests get this")
    max_owner_lease_s: float = Field(default=3600.0, gt=0, description="Longer ones get this")
    max_sessions: int = Field(default=256, gt=0, description="Per replica")

    workspace_root: str = Field(default="", description="Parent of workspaces; '' = temp dir")
    # The R2E-Gym training script's --cache-dir: the local test runtime and repos prepared
    # once per replica.
    cache_dir: str = Field(default="", description="Prepared once, reused; '' = temp dir")
    test_runtime: bool = Field(default=True, description="local: a Python with pytest")
    use_bwrap: Literal["auto", "never", "require"] = "auto"
    # Without bubblewrap the local backend would run the model's commands unconfined as
    # this service's user: it refuses to start unless this says that is wanted.
    sandbox_allow_unisolated: bool = Field(
        default=False, description="Local backend without bubblewrap: run commands unconfined"
    )
    sandbox_run_as: str = Field(
        default="65534:65534",
        pattern=r"^[1-9][0-9]*:[1-9][0-9]*$",
        description="uid:gid of bubblewrapped commands when the service runs as root",
    )
    bwrap_hide_paths: list[str] = Field(
        default_factory=lambda: list(DEFAULT_HIDE_PATHS),
        # An interpreter on sandbox_path that lives under one of these needs its
        # installation listed in bwrap_expose_paths.
        description="Replaced by empty dirs inside bubblewrap so sandboxes cannot read them",
    )
    bwrap_expose_paths: list[str] = Field(
        default_factory=list,
        description="Bound back read-only over hidden paths, e.g. a Python under /root",
    )
    # PATH inside sandboxed commands: standard system dirs, never the server's own PATH.
    sandbox_path: str = Field(default=DEFAULT_SANDBOX_PATH, description="PATH of commands")
    # `{junitxml}` becomes a report path the backend owns and parses after the run.
    test_command: str = Field(default=DEFAULT_TEST_COMMAND)

    # 0 turns a limit off. They apply per process, so they bound runaway commands but are
    # not a memory quota for a whole session (that is the Docker backend's job).
    rlimit_as_bytes: int = Field(default=8 * GiB, ge=0)
    rlimit_fsize_bytes: int = Field(default=1 * GiB, ge=0)
    rlimit_cpu_s: int = Field(default=1800, ge=0)
    rlimit_nofile: int = Field(default=4096, ge=0)

    allow_local_stdio: bool = Field(
        default=False,
        description="Local backend: McpStdio may run its args as a local command (no container)",
    )

    # -- docker backend ------------------------------------------------------------------
    deployment: str = Field(
        default="artfleet",
        pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$",
        description="Label scope: replicas reap only containers of their own deployment",
    )
    docker_host: str = Field(default="", description="'' = DOCKER_HOST or the local socket")
    sandbox_image: str = Field(default="artfleet/base:bookworm", description="Default image")
    pull_images: bool = Field(default=False, description="Pull images the engine lacks")
    sandbox_user: str = Field(default="1000:1000", pattern=r"^[1-9][0-9]*:[0-9]+$")
    memory_bytes: int = Field(default=1 * GiB, gt=0, description="Per session, no swap")
    max_memory_bytes: int = Field(default=8 * GiB, gt=0)
    cpus: float = Field(default=1.0, gt=0)
    max_cpus: float = Field(default=4.0, gt=0)
    pids: int = Field(default=256, gt=0, description="Processes per session")
    max_pids: int = Field(default=4096, gt=0)
    tmp_bytes: int = Field(default=256 * MiB, gt=0, description="Size of /tmp (tmpfs)")
    max_tmp_bytes: int = Field(default=4 * GiB, gt=0)
    allow_network: bool = Field(default=True, description="May sessions opt in to network")
    sandbox_network: str = Field(default="bridge", description="Network of opted-in sessions")
    max_lifetime_s: float = Field(default=4 * 3600.0, gt=0, description="Hard session bound")
    pool_size: int = Field(
        default=2,
        ge=0,
        le=64,
        description="Warm containers per image (docker), sessions with their shell up "
        "(local) and session dirs per recent repo (both backends)",
    )
    pool_images: list[str] = Field(
        default_factory=list, description="Warmed at start besides sandbox_image"
    )
    pool_max_age_s: float = Field(default=3600.0, gt=0)
    pool_max_images: int = Field(
        default=8, ge=0, le=1024, description="Task images that keep a warm pool (LRU)"
    )
    drain_limit_bytes: int = Field(
        default=64 * MiB, gt=0, description="A command printing more than this is killed"
    )
    docker_threads: int = Field(default=64, ge=4, le=1024, description="Blocking engine calls")

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> SandboxSettings:
        # Lowering a cap alone (ARTFLEET_MAX_TIMEOUT_S=30) should just work, so defaults
        # follow their caps down instead of failing the start.
        self.default_timeout_s = min(self.default_timeout_s, self.max_timeout_s)
        self.default_output_bytes = min(self.default_output_bytes, self.max_output_bytes)
        self.idle_ttl_s = min(self.idle_ttl_s, self.max_idle_ttl_s)
        lease = max(self.owner_lease_s, self.min_owner_lease_s)
        self.owner_lease_s = min(lease, self.max_owner_lease_s)
        self.memory_bytes = min(self.memory_bytes, self.max_memory_bytes)
        self.cpus = min(self.cpus, self.max_cpus)
        self.pids = min(self.pids, self.max_pids)
        self.tmp_bytes = min(self.tmp_bytes, self.max_tmp_bytes)
        return self
