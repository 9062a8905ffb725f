"""The sandbox backend interface: plain dataclasses in, plain dataclasses out.

The servicer speaks protobuf; backends never see it. That keeps a backend testable with
real processes and no gRPC, and lets the Docker backend slot in beside `local` later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

Outcome = Literal["passed", "failed", "errored", "skipped"]


class SandboxError(Exception):
    """Something went wrong on the server side (maps to INTERNAL)."""


class NotFound(SandboxError):
    """Something the request names does not exist (maps to NOT_FOUND)."""


class SessionNotFound(NotFound):
    """No open session has this id: never created, closed, or reaped."""


class PathNotFound(NotFound):
    """The workspace has no file at this path."""


class InvalidArgument(SandboxError):
    """The request itself is wrong and retrying it unchanged cannot help (INVALID_ARGUMENT)."""


class InvalidPath(InvalidArgument):
    """A client path is absolute, climbs out with `..`, or escapes through a symlink."""


class CapacityExceeded(SandboxError):
    """The backend holds as many sessions as it may (maps to RESOURCE_EXHAUSTED)."""


@dataclass(frozen=True)
class FileSpec:
    path: str  # relative to the workspace
    content: bytes
    mode: int = 0  # 0 means 0o644


@dataclass(frozen=True)
class SessionSpec:
    files: Sequence[FileSpec] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    network: bool = False
    job_id: str = ""
    image: str = ""  # container image; the local backend ignores it
    idle_ttl_s: float = 0.0  # 0 = the backend's default


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    workdir: str
    backend: str
    isolation: str  # says plainly how isolated the session is


@dataclass(frozen=True)
class ExecSpec:
    command: str
    timeout_s: float
    max_output_bytes: int  # per stream
    cwd: str = ""  # relative to the workspace
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: bytes = b""


@dataclass(frozen=True)
class ExecOutcome:
    exit_code: int  # -1 on timeout; 128+N when killed by signal N (shell convention)
    stdout: bytes
    stderr: bytes
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    duration_s: float


@dataclass(frozen=True)
class CaseResult:
    name: str
    outcome: Outcome
    duration_s: float
    message: str = ""


@dataclass(frozen=True)
class RunTestsReport:
    exit_code: int
    timed_out: bool
    duration_s: float
    output: str  # stdout+stderr, truncated
    tests: Sequence[CaseResult] = ()

    def count(self, outcome: Outcome) -> int:
        return sum(1 for case in self.tests if case.outcome == outcome)

    @property
    def total(self) -> int:
        return len(self.tests)


@runtime_checkable
class SandboxBackend(Protocol):
    """What every sandbox backend offers.

    Backends own their sessions: `close_all` and `stop` touch only sessions this
    instance created, so replicas sharing a host never close each other's work.
    Backends update the session-lifecycle metrics (created, active, reaped); the
    servicer records per-call timings.
    """

    name: str

    async def start(self) -> None:
        """Prepare the backend and start background work such as the idle reaper."""

    async def stop(self) -> None:
        """Stop background work and close every session this backend owns, bounded in time."""

    async def create_session(self, spec: SessionSpec) -> SessionInfo: ...

    async def exec(self, session_id: str, spec: ExecSpec) -> ExecOutcome: ...

    async def write_files(self, session_id: str, files: Sequence[FileSpec]) -> int:
        """Write the files and return how many were written."""
        ...

    async def read_file(self, session_id: str, path: str, max_bytes: int) -> tuple[bytes, bool]:
        """Return at most `max_bytes` of the file and whether it was cut short."""
        ...

    async def run_tests(self, session_id: str, command: str, timeout_s: float) -> RunTestsReport:
        """Run the tests; an empty command means the backend's default (pytest + JUnit XML)."""
        ...

    async def close_session(self, session_id: str) -> bool:
        """Close the session; False when there was no such session (closing is idempotent)."""
        ...

    async def close_all(self) -> int:
        """Close every session this backend owns and return how many were closed."""
        ...
