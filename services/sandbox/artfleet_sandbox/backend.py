"""The sandbox backend interface: plain dataclasses in, plain dataclasses out.

The servicer speaks protobuf; backends never see it. That keeps a backend testable with
real processes and no gRPC, and lets the Docker backend slot in beside `local` later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from artfleet.clients.sandbox import SESSION_GONE
from artfleet.contracts.env_names import ENV_VAR_NAME
from artfleet_sandbox.replica import replica_of

Outcome = Literal["passed", "failed", "errored", "skipped"]
# "session": the session's default; "repl": in the session's long-lived shell (state
# persists); "stateless": a fresh `sh -c` per command.
ExecMode = Literal["session", "repl", "stateless"]

_MAX_COMMAND_BYTES = 128 * 1024 - 1  # Linux refuses longer single arguments (E2BIG)


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


class ImageMissing(InvalidArgument):
    """The image a request names is not on the sandbox's engine (and it may not pull)."""


class InvalidPath(InvalidArgument):
    """A client path is absolute, climbs out with `..`, or escapes through a symlink."""


class Forbidden(SandboxError):
    """The deployment's policy does not allow what the request asks (PERMISSION_DENIED)."""


class Unavailable(SandboxError):
    """The session or the engine behind it is gone; retrying the episode elsewhere may help
    (maps to UNAVAILABLE)."""


class SessionElsewhere(Unavailable):
    """The session id names another replica: this one restarted, or the call was misrouted."""


class CapacityExceeded(SandboxError):
    """The backend holds as many sessions as it may (maps to RESOURCE_EXHAUSTED)."""


@dataclass(frozen=True)
class FileSpec:
    path: str  # relative to the workspace
    content: bytes
    mode: int = 0  # 0 means 0o644


@dataclass(frozen=True)
class Resources:
    """Per-session limits; 0 means the deployment default (the servicer fills them in)."""

    memory_bytes: int = 0
    cpus: float = 0.0
    pids: int = 0
    tmp_bytes: int = 0


@dataclass(frozen=True)
class RepoSpec:
    """A repository under the replica's cache dir, seeded into the workspace (repocache)."""

    path: str  # relative to the cache dir, e.g. "astropy/astropy"
    commit: str = ""  # "" = the directory as it is
    dest: str = ""  # where in the workspace; "" = its root


@dataclass(frozen=True)
class SessionSpec:
    files: Sequence[FileSpec] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    network: bool = False
    job_id: str = ""
    image: str = ""  # container image; the local backend ignores it
    idle_ttl_s: float = 0.0  # 0 = the backend's default
    resources: Resources = Resources()
    repl: bool = True  # Exec's default mode: the session's REPL, or stateless
    repo: RepoSpec | None = None  # seeded before `files` are written


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    workdir: str
    backend: str
    isolation: str  # says plainly how isolated the session is
    replica: str = ""  # the replica holding it; session ids start with it


@dataclass(frozen=True)
class ExecSpec:
    command: str
    timeout_s: float
    max_output_bytes: int  # per stream
    cwd: str = ""  # relative to the workspace
    env: Mapping[str, str] = field(default_factory=dict)
    stdin: bytes = b""
    mode: ExecMode = "session"

    def use_repl(self, session_default: bool) -> bool:
        return self.mode == "repl" or (self.mode == "session" and session_default)


@dataclass(frozen=True)
class ExecOutcome:
    exit_code: int  # -1 on timeout; 128+N when killed by signal N (shell convention)
    stdout: bytes
    stderr: bytes
    timed_out: bool
    stdout_truncated: bool
    stderr_truncated: bool
    duration_s: float
    oom_killed: bool = False  # the kernel's OOM killer ended a process of the command
    shell_restarted: bool = False  # REPL: the shell's state was lost at or before this call
    stateless: bool = True  # how it ran (metrics label the latency by mode)


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


@dataclass(frozen=True)
class ImageReport:
    """Which images a backend cannot start sessions from (ImageCheck)."""

    missing: Sequence[str]
    pull_allowed: bool  # missing ones are pulled at first use
    runs_images: bool  # False: the backend ignores images (local)


def check_env(env: Mapping[str, str]) -> None:
    for key, value in env.items():
        if not ENV_VAR_NAME.match(key):
            raise InvalidArgument(f"invalid environment variable name: {key!r}")
        if "\0" in value:
            raise InvalidArgument(f"environment variable {key} contains a NUL byte")


def check_command(command: str) -> None:
    if not command.strip():
        raise InvalidArgument("command is empty")
    if "\0" in command:
        raise InvalidArgument("command contains a NUL byte")
    if len(command.encode()) > _MAX_COMMAND_BYTES:
        raise InvalidArgument("command is over 128 KiB: write it to a file and run that")


def session_missing(session_id: str, replica_id: str) -> SandboxError:
    """The error for a session id this replica does not hold: UNAVAILABLE when the id names
    another replica (restarted, gone, or misrouted), NOT_FOUND otherwise."""
    owner = replica_of(session_id)
    if owner is not None and owner != replica_id:
        return SessionElsewhere(
            f"session {session_id!r} belongs to sandbox replica {owner}, not this one "
            f"({replica_id}): that replica restarted or is gone, or the call was routed to "
            "the wrong replica; start the episode again on a new session"
        )
    return SessionNotFound(f"{SESSION_GONE} {session_id!r} (closed, reaped or unknown)")


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

    async def check_images(self, images: Sequence[str]) -> ImageReport:
        """Which of `images` sessions could not start from (asked at SubmitJob)."""
        ...

    async def close_session(self, session_id: str) -> bool:
        """Close the session; False when there was no such session (closing is idempotent)."""
        ...

    async def close_all(self) -> int:
        """Close every session this backend owns and return how many were closed."""
        ...
