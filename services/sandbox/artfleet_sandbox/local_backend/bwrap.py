"""Bubblewrap for the local backend: finding a working one, and the argv that confines.

Inside, a command sees the host root read-only, fresh /dev, /proc and /tmp, empty dirs
over secrets (and over every other session), its own session dir read-write at the same
path, and no network unless the session asked for it. `--unshare-pid` also means its
background processes end with it: the namespace dies with its first process.

A server running as root sets the sandbox up as root (so paths only root may read, like
a Python under /root, can still be exposed) but without a user namespace, and the command
itself then runs through `setpriv` as an unprivileged host user (`run_as`, nobody by
default) with no capabilities. A user namespace alone is not enough: the sandbox uid would
map back to host uid 0, which owns, and so may read, every root-only file.
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

# The read-only root and fresh /dev and /proc of every session, and of the start probe.
ROOT_MOUNTS = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc")
DEFAULT_HIDE_PATHS = ("/root", "/home", "/run/secrets", "/var/run/secrets")
UNISOLATED_NOTICE = (
    "ARTFLEET_SANDBOX_ALLOW_UNISOLATED=1 and no bubblewrap: the model's commands run "
    "unconfined as this service's user on this host; for isolation install bubblewrap "
    "(apt-get install bubblewrap) or use Docker (ARTFLEET_SANDBOX_BACKEND=docker)"
)


def unisolated_refusal(mode: str) -> str:
    if mode == "never":
        why = "turned off (use_bwrap=never)"
    elif shutil.which("bwrap") is None:
        why = "not installed"
    else:
        why = "installed but cannot run here (are user namespaces disabled?)"
    return (
        f"the local sandbox backend has no isolation: bubblewrap is {why}. Install it "
        "(apt-get install bubblewrap) and allow user namespaces, or use Docker "
        "(ARTFLEET_SANDBOX_BACKEND=docker), or accept that the model's commands run as this "
        "service's user on this host with ARTFLEET_SANDBOX_ALLOW_UNISOLATED=1"
    )


def _under(path: str, parents: Sequence[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def drop_privileges(run_as: tuple[int, int] | None) -> list[str]:
    """argv (inside bubblewrap) that runs the rest as `run_as` (uid, gid) when we are root;
    [] otherwise: a non-root server cannot change users, its commands keep its uid."""
    if run_as is None or os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise SandboxError(
            "the sandbox server runs as root and needs setpriv (util-linux) to run commands "
            "as an unprivileged user: install util-linux, or run the server as a normal user"
        )
    uid, gid = run_as
    drop = [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    return [setpriv, *drop, "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"]


class Bubblewrap:
    def __init__(
        self,
        executable: str,
        hide: Sequence[str] = DEFAULT_HIDE_PATHS,
        expose: Sequence[str] = (),
        drop: Sequence[str] = (),
    ) -> None:
        self.executable = executable
        self.drop = list(drop)  # the privilege drop inside, when we are root
        real = os.path.realpath
        self.hidden = sorted({real(p) for p in hide if os.path.isdir(p)})
        # Bound back read-only over hidden dirs, e.g. a Python installed under /root.
        self.exposed = sorted({real(p) for p in expose})

    def namespaces(self, network: bool) -> list[str]:
        if not self.drop:
            return ["--unshare-all", *(["--share-net"] if network else [])]
        # As root: no user namespace (it would map the sandbox back to host root), and
        # just the capabilities setpriv needs to drop to the sandbox user.
        flags = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        flags += [] if network else ["--unshare-net"]
        return [*flags, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]

    def _expose(self) -> list[str]:
        argv: list[str] = []
        made: set[str] = set()
        emptied = ["/tmp", *self.hidden]  # fresh tmpfs inside: an exposed path's parents are gone
        for path in self.exposed:
            # bubblewrap makes missing parents 0700 (root's): the sandbox user needs 0755.
            parent, parents = os.path.dirname(path), []
            while _under(parent, emptied) and parent not in emptied:
                parents.append(parent)
                parent = os.path.dirname(parent)
            for directory in reversed(parents):
                if directory not in made:
                    made.add(directory)
                    argv += ["--perms", "0755", "--dir", directory]
            argv += ["--ro-bind-try", path, path]
        return argv

    def argv(
        self, *, session_root: str, others_root: str, cwd: str, network: bool, command: list[str]
    ) -> list[str]:
        """`command` confined to `session_root`; `others_root` (all sessions) is hidden."""
        argv = [self.executable, *ROOT_MOUNTS]
        # Order matters: later mounts go on top. Empty dirs over secrets, then what must
        # stay visible, then an empty dir over all sessions, then this session itself.
        for path in ["/tmp", *self.hidden]:
            argv += ["--tmpfs", path]
        argv += self._expose()
        argv += ["--tmpfs", others_root, "--bind", session_root, session_root]
        argv += self.namespaces(network)
        # --new-session: no TIOCSTI into a terminal; --die-with-parent: gone if we are.
        argv += ["--die-with-parent", "--new-session", "--chdir", cwd, "--"]
        return [*argv, *self.drop, *command]

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


async def _works(bwrap: Bubblewrap, search_path: str) -> bool:
    # Installed is not enough: user namespaces may be disabled (e.g. inside Docker), and
    # root may lack the capabilities to make the others (an unprivileged container).
    # The mounts every session makes: a pod or container that masks /proc paths lets
    # bubblewrap start but not mount a fresh /proc, and then every session would fail.
    argv = [bwrap.executable, *ROOT_MOUNTS, *bwrap.namespaces(False)]
    argv += ["--die-with-parent", "--", *bwrap.drop, "true"]
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
    run_as: tuple[int, int] | None = None,
) -> Bubblewrap | None:
    """A working bubblewrap, None when off or unavailable (SandboxError if required)."""
    if mode == "never":
        return None
    found = shutil.which("bwrap")
    bwrap = Bubblewrap(found, hide, expose, drop_privileges(run_as)) if found else None
    if bwrap is not None and await _works(bwrap, search_path):
        bwrap.warn_hidden(search_path)
        return bwrap
    if mode == "require":
        raise SandboxError("use_bwrap=require but bubblewrap is missing or cannot run here")
    return None
