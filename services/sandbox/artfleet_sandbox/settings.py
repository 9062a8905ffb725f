"""Settings of the sandbox service, read from `ARTFLEET_*` variables.

Names are chosen to read well with the prefix: `ARTFLEET_SANDBOX_BACKEND`,
`ARTFLEET_MAX_TIMEOUT_S`, `ARTFLEET_USE_BWRAP`, ...
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from artfleet.config import ServerSettings
from artfleet_sandbox.bwrap import DEFAULT_HIDE_PATHS
from artfleet_sandbox.local import DEFAULT_SANDBOX_PATH, DEFAULT_TEST_COMMAND

MiB = 1024 * 1024
GiB = 1024 * MiB


class SandboxSettings(ServerSettings):
    """Deployment policy of one sandbox replica; requests asking for more are clamped."""

    sandbox_backend: Literal["local"] = "local"

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
    max_sessions: int = Field(default=256, gt=0, description="Per replica")

    workspace_root: str = Field(default="", description="Parent of workspaces; '' = temp dir")
    use_bwrap: Literal["auto", "never", "require"] = "auto"
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

    @model_validator(mode="after")
    def _defaults_within_caps(self) -> SandboxSettings:
        # Lowering a cap alone (ARTFLEET_MAX_TIMEOUT_S=30) should just work, so defaults
        # follow their caps down instead of failing the start.
        self.default_timeout_s = min(self.default_timeout_s, self.max_timeout_s)
        self.default_output_bytes = min(self.default_output_bytes, self.max_output_bytes)
        self.idle_ttl_s = min(self.idle_ttl_s, self.max_idle_ttl_s)
        return self
