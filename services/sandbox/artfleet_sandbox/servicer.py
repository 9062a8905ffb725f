"""`artfleet.v1.Sandbox` over any `SandboxBackend`: protobuf in, dataclasses to the backend.

Deployment policy lives here, not in backends: zero means "the deployment default",
negative or non-finite values are refused, and anything above a cap is clamped to it.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import grpc

from artfleet.runtime.rpc.interceptors import bounded_details
from artfleet.v1 import sandbox_pb2 as pb
from artfleet.v1 import sandbox_pb2_grpc
from artfleet_sandbox import metrics
from artfleet_sandbox.backend import (
    CapacityExceeded,
    ExecMode,
    ExecSpec,
    FileSpec,
    Forbidden,
    InvalidArgument,
    NotFound,
    RepoSpec,
    Resources,
    SandboxBackend,
    SandboxError,
    SessionSpec,
    Unavailable,
)
from artfleet_sandbox.leases import OwnerLeases, check_owner
from artfleet_sandbox.settings import SandboxSettings
from artfleet_sandbox.stdio_rpc import serve as serve_stdio

log = logging.getLogger(__name__)

_S = TypeVar("_S")
_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")

_CODES: tuple[tuple[type[SandboxError], grpc.StatusCode], ...] = (
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (CapacityExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (Forbidden, grpc.StatusCode.PERMISSION_DENIED),
)


@dataclass(frozen=True)
class Limits:
    default_timeout_s: float = 60.0
    max_timeout_s: float = 600.0
    default_output_bytes: int = 256 * 1024
    max_output_bytes: int = 1024 * 1024
    max_read_bytes: int = 2 * 1024 * 1024
    default_idle_ttl_s: float = 1800.0
    max_idle_ttl_s: float = 6 * 3600.0
    default_owner_lease_s: float = 60.0
    min_owner_lease_s: float = 1.0
    max_owner_lease_s: float = 3600.0

    @classmethod
    def from_settings(cls, settings: SandboxSettings) -> Limits:
        return cls(
            default_timeout_s=settings.default_timeout_s,
            max_timeout_s=settings.max_timeout_s,
            default_output_bytes=settings.default_output_bytes,
            max_output_bytes=settings.max_output_bytes,
            max_read_bytes=settings.max_read_bytes,
            default_idle_ttl_s=settings.idle_ttl_s,
            max_idle_ttl_s=settings.max_idle_ttl_s,
            default_owner_lease_s=settings.owner_lease_s,
            min_owner_lease_s=settings.min_owner_lease_s,
            max_owner_lease_s=settings.max_owner_lease_s,
        )


_MAX_IMAGES = 100_000  # R2E-Gym has a few thousand task images; a check is one listing


def _clamp(value: float, default: float, cap: float, name: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{name} must be a non-negative number (0 = default), got {value}")
    return min(value or default, cap)


def _require_session(session_id: str) -> str:
    if not session_id:
        raise InvalidArgument("session_id is required")
    return session_id


def _files(files: Any) -> list[FileSpec]:
    return [FileSpec(path=f.path, content=f.content, mode=f.mode) for f in files]


def _resources(message: pb.Resources) -> Resources:
    # Zeros stay zeros (the backend's defaults); the backend clamps to its caps.
    if not math.isfinite(message.cpus):
        raise InvalidArgument("resources.cpus must be a finite number")
    for name in ("memory_bytes", "cpus", "pids", "tmp_bytes"):
        if getattr(message, name) < 0:
            raise InvalidArgument(f"resources.{name} must not be negative (0 = default)")
    return Resources(
        memory_bytes=message.memory_bytes,
        cpus=message.cpus,
        pids=message.pids,
        tmp_bytes=message.tmp_bytes,
    )


_MODES: dict[int, ExecMode] = {
    pb.EXEC_MODE_UNSPECIFIED: "session",
    pb.EXEC_MODE_REPL: "repl",
    pb.EXEC_MODE_STATELESS: "stateless",
}


def _mode(value: int) -> ExecMode:
    mode = _MODES.get(value)
    if mode is None:
        raise InvalidArgument(f"unknown exec mode {value}")
    return mode


def _rpc(
    method: Callable[[_S, _Req, Any], Awaitable[_Resp]],
) -> Callable[[_S, _Req, Any], Awaitable[_Resp]]:
    """Turn backend errors into gRPC status codes; hide internals of unexpected ones."""

    @functools.wraps(method)
    async def handler(self: _S, request: _Req, context: Any) -> _Resp:
        try:
            return await method(self, request, context)
        except SandboxError as exc:
            code = next((c for kind, c in _CODES if isinstance(exc, kind)), None)
            if code is None:
                log.error("%s failed: %s", method.__name__, exc)
                code = grpc.StatusCode.INTERNAL
            await context.abort(code, bounded_details(str(exc)))
            raise  # unreachable: abort raises
        except Exception:
            log.exception("%s failed", method.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, "internal sandbox error (see logs)")
            raise

    return handler


class SandboxServicer(sandbox_pb2_grpc.SandboxServicer):
    def __init__(self, backend: SandboxBackend, limits: Limits | None = None) -> None:
        self.backend = backend
        self.limits = lim = limits or Limits()
        # Started and stopped with the backend (SandboxApp): closes lapsed owners' sessions.
        self.leases = OwnerLeases(
            self._close_lapsed,
            default_s=lim.default_owner_lease_s,
            min_s=lim.min_owner_lease_s,
            max_s=lim.max_owner_lease_s,
        )

    async def _close_lapsed(self, session_id: str) -> bool:
        closed = await self.backend.close_session(session_id)
        if closed:
            log.info("session %s closed: its owner's lease ran out", session_id)
        return closed

    def _timeout(self, value: float) -> float:
        lim = self.limits
        return _clamp(value, lim.default_timeout_s, lim.max_timeout_s, "timeout_s")

    @_rpc
    async def CreateSession(self, request: pb.CreateSessionRequest, context: Any) -> pb.Session:
        lim = self.limits
        spec = SessionSpec(
            files=_files(request.files),
            env=dict(request.env),
            network=request.network,
            job_id=request.job_id,
            image=request.image,
            idle_ttl_s=_clamp(
                request.idle_ttl_s, lim.default_idle_ttl_s, lim.max_idle_ttl_s, "idle_ttl_s"
            ),
            resources=_resources(request.resources),
            repl=_mode(request.exec_mode) != "stateless",
            repo=RepoSpec(request.repo.path, request.repo.commit, request.repo.dest)
            if request.HasField("repo")
            else None,
        )
        owner = check_owner(request.owner)
        lease_s = self.leases.lease(request.owner_lease_s)  # checked even without an owner
        info = await self.backend.create_session(spec)
        if owner:
            self.leases.hold(info.session_id, owner, lease_s)
        log.info(
            "session %s created (job %r, owner %r, %s)",
            info.session_id,
            spec.job_id,
            owner,
            info.isolation,
        )
        return pb.Session(**asdict(info))  # the message's fields, one for one

    @_rpc
    async def Exec(self, request: pb.ExecRequest, context: Any) -> pb.ExecResult:
        lim = self.limits
        if not request.command.strip():
            raise InvalidArgument("command is empty")
        spec = ExecSpec(
            command=request.command,
            cwd=request.cwd,
            env=dict(request.env),
            stdin=request.stdin,
            mode=_mode(request.mode),
            timeout_s=self._timeout(request.timeout_s),
            max_output_bytes=int(
                _clamp(
                    request.max_output_bytes,
                    lim.default_output_bytes,
                    lim.max_output_bytes,
                    "max_output_bytes",
                )
            ),
        )
        out = await self.backend.exec(_require_session(request.session_id), spec)
        metrics.EXEC_SECONDS.labels("stateless" if out.stateless else "repl").observe(
            out.duration_s
        )
        if out.timed_out:
            metrics.EXEC_TIMEOUTS.inc()
        # The message's fields, one for one, and how it ran (only the metrics above tell).
        result = asdict(out)
        del result["stateless"]
        return pb.ExecResult(**result)

    @_rpc
    async def WriteFiles(
        self, request: pb.WriteFilesRequest, context: Any
    ) -> pb.WriteFilesResponse:
        session_id = _require_session(request.session_id)
        written = await self.backend.write_files(session_id, _files(request.files))
        return pb.WriteFilesResponse(written=written)

    @_rpc
    async def ReadFile(self, request: pb.ReadFileRequest, context: Any) -> pb.ReadFileResponse:
        lim = self.limits
        max_bytes = int(
            _clamp(request.max_bytes, lim.max_read_bytes, lim.max_read_bytes, "max_bytes")
        )
        session_id = _require_session(request.session_id)
        content, truncated = await self.backend.read_file(session_id, request.path, max_bytes)
        return pb.ReadFileResponse(content=content, truncated=truncated)

    @_rpc
    async def RunTests(self, request: pb.RunTestsRequest, context: Any) -> pb.TestReport:
        session_id = _require_session(request.session_id)
        report = await self.backend.run_tests(
            session_id, request.command, self._timeout(request.timeout_s)
        )
        metrics.RUN_TESTS_SECONDS.observe(report.duration_s)
        return pb.TestReport(
            passed=report.count("passed"),
            failed=report.count("failed"),
            errored=report.count("errored"),
            skipped=report.count("skipped"),
            total=report.total,
            exit_code=report.exit_code,
            timed_out=report.timed_out,
            duration_s=report.duration_s,
            output=report.output,
            tests=[
                pb.TestCaseResult(
                    name=case.name,
                    outcome=case.outcome,
                    duration_s=case.duration_s,
                    message=case.message,
                )
                for case in report.tests
            ],
        )

    @_rpc
    async def CloseSession(
        self, request: pb.CloseSessionRequest, context: Any
    ) -> pb.CloseSessionResponse:
        # Idempotent: closing twice (or after the reaper did) is not an error, so rollout
        # workers can close in a `finally` without special cases.
        session_id = _require_session(request.session_id)
        closed = await self.backend.close_session(session_id)
        self.leases.drop(session_id)
        return pb.CloseSessionResponse(closed=closed)

    @_rpc
    async def RenewLease(
        self, request: pb.RenewLeaseRequest, context: Any
    ) -> pb.RenewLeaseResponse:
        if not request.owner:
            raise InvalidArgument("owner is required")
        owner = check_owner(request.owner)
        held = self.leases.renew(owner, self.leases.lease(request.lease_s))
        return pb.RenewLeaseResponse(sessions=held)

    @_rpc
    async def ImageCheck(
        self, request: pb.ImageCheckRequest, context: Any
    ) -> pb.ImageCheckResponse:
        images = list(request.images)
        if len(images) > _MAX_IMAGES:
            raise InvalidArgument(f"images: at most {_MAX_IMAGES} per check, got {len(images)}")
        for image in images:
            if not image or len(image) > 512 or any(ch.isspace() for ch in image):
                raise InvalidArgument(f"images: {image[:80]!r} is not an image reference")
        report = await self.backend.check_images(images)
        return pb.ImageCheckResponse(
            missing=list(report.missing),
            pull_allowed=report.pull_allowed,
            backend=self.backend.name,
            runs_images=report.runs_images,
        )

    async def McpStdio(self, request_iterator: Any, context: Any) -> AsyncIterator[pb.StdioChunk]:
        # Statuses are set by serve_stdio itself (a stream has no single reply to wrap).
        async for chunk in serve_stdio(self.backend, request_iterator, context):
            yield chunk
