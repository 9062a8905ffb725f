"""Settings of the `local` backend (`LocalConfig`) and the names its sessions report.

Kept apart from the backend so that settings and tests can import them without it.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from artfleet_sandbox.local_backend.bwrap import DEFAULT_HIDE_PATHS

DEFAULT_SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_TEST_COMMAND = "python -m pytest -q --junitxml={junitxml}"
ISOLATION_BWRAP = "bubblewrap"
ISOLATION_NONE = "process (no isolation: commands run as the server's user)"

UNPRIVILEGED = (65534, 65534)  # nobody:nogroup


@dataclass(frozen=True)
class LocalConfig:
    """Knobs of the local backend; `SandboxSettings` maps onto it (see factory.py)."""

    replica_id: str = ""  # prefixes session ids; "" = a new one
    workspace_root: str = ""  # parent of this backend's own dir; "" = the system temp dir
    idle_ttl_s: float = 1800.0
    reap_interval_s: float = 30.0
    max_sessions: int = 256
    use_bwrap: Literal["auto", "never", "require"] = "auto"
    bwrap_hide_paths: Sequence[str] = DEFAULT_HIDE_PATHS
    # Bound back read-only over the hidden ones, e.g. a Python installed under /root.
    bwrap_expose_paths: Sequence[str] = ()
    path: str = DEFAULT_SANDBOX_PATH  # PATH of sandboxed commands
    test_command: str = DEFAULT_TEST_COMMAND
    test_output_bytes: int = 64 * 1024
    rlimits: Mapping[int, int] = field(
        default_factory=lambda: {
            resource.RLIMIT_AS: 8 << 30,
            resource.RLIMIT_FSIZE: 1 << 30,
            resource.RLIMIT_CPU: 1800,
            resource.RLIMIT_NOFILE: 4096,
        }
    )
    stop_timeout_s: float = 10.0
    cache_dir: str = ""  # the test runtime and cached repos; "" = default_cache_dir()
    test_runtime: bool = True  # prepare the Python + pytest runtime for sessions
    repo_pool_size: int = 2  # session dirs kept unpacked per recently used repo (prepared_dirs)
    # Plain sessions kept open ahead, shell running, per network mode (warm_sessions).
    session_pool_size: int = 0
    # McpStdio: run the request's args as a local command (no container: dev and tests).
    allow_stdio: bool = False
    # Without bubblewrap, run commands as the server's user on the host? An explicit choice.
    allow_unisolated: bool = False
    # (uid, gid) of commands under bubblewrap when the server is root; None keeps root.
    run_as: tuple[int, int] | None = UNPRIVILEGED
