"""Client paths confined to a workspace, and the blocking file I/O behind WriteFiles/ReadFile.

Every function here blocks: the backend calls them through `asyncio.to_thread`.

Confinement is checked on the resolved path (symlinks followed), so a symlink inside the
workspace that points inside it works, and one pointing outside is refused. The final
component is opened with O_NOFOLLOW so a symlink swapped in after the check is refused
too. Without bubblewrap the sandbox can touch the host anyway; with it, commands cannot
see anything outside the session dir to link to.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from artfleet_sandbox.backend import FileSpec, InvalidArgument, InvalidPath, PathNotFound

_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC


def clean_relpath(path: str, *, allow_empty: bool = False) -> str:
    """Validate a client path syntactically; returns it normalised (no `.`, no `//`)."""
    if "\0" in path:
        raise InvalidPath("path contains a NUL byte")
    if not path or path in (".", "./"):
        if allow_empty:
            return ""
        raise InvalidPath("path is empty")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise InvalidPath(f"path must be relative to the workspace: {path!r}")
    if ".." in pure.parts:
        raise InvalidPath(f"path must not contain '..': {path!r}")
    return str(pure)


def resolve_inside(root: str, path: str, *, allow_empty: bool = False) -> str:
    """The real path of `path` under `root` (a real path); InvalidPath if it leaves root."""
    rel = clean_relpath(path, allow_empty=allow_empty)
    real = os.path.realpath(os.path.join(root, rel))
    if real != root and not real.startswith(root + os.sep):
        raise InvalidPath(f"path escapes the workspace through a symlink: {path!r}")
    return real


def resolve_dir(root: str, path: str) -> str:
    """An existing directory inside the workspace ('' is the workspace itself)."""
    real = resolve_inside(root, path, allow_empty=True)
    if not os.path.isdir(real):
        raise InvalidPath(f"not a directory in the workspace: {path!r}")
    return real


def _os_error(exc: OSError, path: str) -> Exception:
    """Map an OSError on a client path to the error the client should see."""
    if exc.errno == errno.ENOENT:
        return PathNotFound(f"no such file in the workspace: {path!r}")
    if exc.errno == errno.ELOOP:
        return InvalidPath(f"path is a symlink: {path!r}")
    if exc.errno in (errno.EISDIR, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG):
        return InvalidArgument(f"{path!r}: {exc.strerror}")
    return exc  # ENOSPC, EIO, ...: the server's problem, reported as INTERNAL


def _missing_dirs(root: str, directory: str) -> list[str]:
    """The directories between `root` and `directory` (inclusive) that do not exist yet."""
    missing = []
    while directory != root and not os.path.lexists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    return missing[::-1]


def write_file(root: str, spec: FileSpec, owner: tuple[int, int] | None = None) -> None:
    """Write one client file; `owner` (uid, gid) is given what this creates (the sandbox
    user, when commands run as another user than the server)."""
    real = resolve_inside(root, spec.path)
    mode = (spec.mode & 0o777) or 0o644  # no setuid/setgid/sticky from clients
    try:
        created = _missing_dirs(root, os.path.dirname(real))
        os.makedirs(os.path.dirname(real), exist_ok=True)
        # Re-check: the directories just created must still resolve inside the workspace.
        resolve_inside(root, spec.path)
        if owner is not None:
            for directory in created:
                os.chown(directory, *owner, follow_symlinks=False)
        fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _OPEN_FLAGS, 0o600)
    except OSError as exc:
        raise _os_error(exc, spec.path) from exc
    with os.fdopen(fd, "wb") as fh:
        fh.write(spec.content)
        if owner:
            os.fchown(fh.fileno(), *owner)  # on the open file: no path to swap meanwhile
        os.fchmod(fh.fileno(), mode)  # after writing, so a 0o444 file can still be filled


def read_file(root: str, path: str, max_bytes: int) -> tuple[bytes, bool]:
    real = resolve_inside(root, path)
    try:
        # O_NONBLOCK: opening a FIFO a command left behind must not hang the server.
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | _OPEN_FLAGS)
    except OSError as exc:
        raise _os_error(exc, path) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidPath(f"not a regular file: {path!r}")
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    return data[:max_bytes], len(data) > max_bytes


def remove_tree(path: str) -> None:
    """Remove a workspace even where a command made directories read-only."""

    def _retry(func: Callable[..., Any], failed: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, 0o700)
            func(failed)

    shutil.rmtree(path, onerror=_retry)


def chown_tree(root: str, owner: tuple[int, int]) -> None:
    """Gives everything under `root` (links themselves, never their targets) to `owner`."""
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.chown(os.path.join(directory, name), *owner, follow_symlinks=False)
    os.chown(root, *owner, follow_symlinks=False)
