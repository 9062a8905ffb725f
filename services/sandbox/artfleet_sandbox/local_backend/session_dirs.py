"""A local session's directory: `work/` (the workspace clients see), `home/` and `tmp/`
(HOME and TMPDIR of its commands) and `reports/` (JUnit files of RunTests), owned by the
sandbox user when commands run as one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

from artfleet_sandbox.backend import FileSpec
from artfleet_sandbox.paths import chown_tree, remove_tree, write_file
from artfleet_sandbox.repocache import extract

SUBDIRS = ("work", "home", "tmp", "reports")
# In a waiting session's dir (warm_sessions.py) until it is taken: what is on disk tells a
# session someone holds from one waiting in the pool.
WAITING_MARKER = ".waiting"


def mark_waiting(root: str, waiting: bool) -> None:
    marker = os.path.join(root, WAITING_MARKER)
    if waiting:
        open(marker, "w").close()
    elif os.path.exists(marker):
        os.remove(marker)


def make_session_dir(
    parent: str, files: Sequence[FileSpec], tarball: str, owner: tuple[int, int] | None
) -> str:
    """A new session dir under `parent` holding `files` (and the repo of `tarball`)."""
    # The dir name is random but is not the session id: commands can see their path.
    root = tempfile.mkdtemp(prefix="s-", dir=parent)
    try:
        subdirs = [os.path.join(root, sub) for sub in SUBDIRS]
        for path in subdirs:
            os.mkdir(path, 0o700)
        if tarball:
            extract(tarball, os.path.join(root, "work"))
        if owner is not None:
            for path in [root, *subdirs]:
                os.chown(path, *owner, follow_symlinks=False)
            if tarball:  # the cached repo is the session user's to edit
                chown_tree(os.path.join(root, "work"), owner)
        write_files(os.path.join(root, "work"), files, owner)
    except BaseException:
        remove_tree(root)
        raise
    return root


def write_files(workdir: str, files: Sequence[FileSpec], owner: tuple[int, int] | None) -> None:
    for spec in files:
        write_file(workdir, spec, owner)
