"""One session of the `local` backend, and the mapping of spawn failures to our errors."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from artfleet_sandbox.backend import InvalidArgument, SandboxError
from artfleet_sandbox.replshell import ReplShell


@dataclass
class LocalSession:
    id: str
    root: str
    tag: str  # the TAG_VAR prefix of every process this session starts
    env: Mapping[str, str]
    network: bool
    job_id: str
    ttl_s: float
    repl_default: bool = True
    repl: ReplShell | None = None  # made on the first REPL call
    repl_tag: str = ""  # TAG_VAR value of the REPL shell's tree
    repl_pid: int = 0
    warming: asyncio.Task[None] | None = None  # the REPL shell starting at session open
    last_used: float = field(default_factory=time.monotonic)
    busy: int = 0

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
