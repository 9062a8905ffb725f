"""One session of the `local` backend, and the mapping of spawn failures to our errors."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass

from artfleet_sandbox.backend import InvalidArgument, SandboxError
from artfleet_sandbox.session_base import BaseSession


@dataclass(kw_only=True)
class LocalSession(BaseSession):
    root: str  # the session dir (session_dirs.py)
    tag: str  # the TAG_VAR prefix of every process this session starts
    repl_tag: str = ""  # TAG_VAR value of the REPL shell's tree
    repl_pid: int = 0

    @property
    def workdir(self) -> str:
        return os.path.join(self.root, "work")


@contextlib.contextmanager
def spawn_errors() -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if exc.errno == errno.E2BIG:  # the environment the client sent is too large
            raise InvalidArgument(f"command or environment too large: {exc}") from exc
        raise SandboxError(f"could not start the command: {exc}") from exc
