"""Bubblewrap for the local backend: finding a working one, and the argv that confines.

Inside, a command sees the host root read-only, fresh /dev, /proc and /tmp, empty dirs
over secrets (and over every other session), its own session dir read-write at the same
path, and no network unless the session asked for it. `--unshare-pid` also means its
background processes end with it: the namespace dies with its first process.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from collections.abc import Sequence
from typing import Literal

from artfleet_sandbox.backend import SandboxError
from artfleet_sandbox.procs import TAG_VAR, run_process

log = logging.getLogger(__name__)

DEFAULT_HIDE_PATHS = ("/root", "/home", "/run/secrets", "/var/run/secrets")


def _under(path: str, parents: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


class Bubblewrap:
    def __init__(
        self, executable: str, hide: Sequence[str] = DEFAULT_HIDE_PATHS, expose: Sequence[str] = ()
    ) -> None:
        self.executable = executable
        real = os.path.realpath
        self.hidden = sorted({real(p) for p in hide if os.path.isdir(p)})
        # Bound back read-only over hidden dirs, e.g. a Python installed under /root.
        self.exposed = sorted({real(p) for p in expose})

    def argv(
        self, *, session_root: str, others_root: str, cwd: str, network: bool, command: list[str]
    ) -> list[str]:
        """`command` confined to `session_root`; `others_root` (all sessions) is hidden."""
        argv = [self.executable, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        # Order matters: later mounts go on top. Empty dirs over secrets, then what must
        # stay visible, then an empty dir over all sessions, then this session itself.
        for path in ["/tmp", *self.hidden]:
            argv += ["--tmpfs", path]
        for path in self.exposed:
            argv += ["--ro-bind-try", path, path]
        argv += ["--tmpfs", others_root, "--bind", session_root, session_root, "--unshare-all"]
        if network:
            argv.append("--share-net")
        # --new-session: no TIOCSTI into a terminal; --die-with-parent: gone if we are.
        return [*argv, "--die-with-parent", "--new-session", "--chdir", cwd, "--", *command]

    def warn_hidden(self, search_path: str) -> None:
        """Log PATH entries the sandbox cannot see (their interpreter would be missing)."""
        for entry in search_path.split(":"):
            real = os.path.realpath(entry)
            if _under(real, self.hidden) and not _under(real, self.exposed):
                log.warning(
                    "sandbox PATH entry %s is hidden inside bubblewrap; "
                    "add its installation to bwrap_expose_paths",
                    entry,
                )


async def _works(executable: str, search_path: str) -> bool:
    # Installed is not enough: user namespaces may be disabled (e.g. inside Docker).
    argv = [executable, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"]
    env = {"PATH": search_path, TAG_VAR: f"probe.{secrets.token_hex(8)}"}
    result = await run_process(argv, cwd="/", env=env, timeout_s=10, max_output_bytes=4096)
    if result.exit_code != 0:
        log.warning("bubblewrap probe failed: %s", result.stderr.decode(errors="replace"))
    return result.exit_code == 0


async def find_bubblewrap(
    mode: Literal["auto", "never", "require"],
    search_path: str,
    hide: Sequence[str] = DEFAULT_HIDE_PATHS,
    expose: Sequence[str] = (),
) -> Bubblewrap | None:
    """A working bubblewrap, None when off or unavailable (SandboxError if required)."""
    if mode == "never":
        return None
    found = shutil.which("bwrap")
    if found and await _works(found, search_path):
        bwrap = Bubblewrap(found, hide, expose)
        bwrap.warn_hidden(search_path)
        return bwrap
    if mode == "require":
        raise SandboxError("use_bwrap=require but bubblewrap is missing or cannot run here")
    log.warning("bubblewrap unavailable: sandboxed commands run as plain processes")
    return None
