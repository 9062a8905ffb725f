"""Wiring: settings → backend → servicer. The process entrypoint lives elsewhere."""

from __future__ import annotations

import resource

from artfleet_sandbox.local import LocalBackend, LocalConfig
from artfleet_sandbox.servicer import Limits, SandboxServicer
from artfleet_sandbox.settings import SandboxSettings


def local_config(settings: SandboxSettings) -> LocalConfig:
    return LocalConfig(
        workspace_root=settings.workspace_root,
        idle_ttl_s=settings.idle_ttl_s,
        reap_interval_s=settings.reap_interval_s,
        max_sessions=settings.max_sessions,
        use_bwrap=settings.use_bwrap,
        bwrap_hide_paths=tuple(settings.bwrap_hide_paths),
        bwrap_expose_paths=tuple(settings.bwrap_expose_paths),
        path=settings.sandbox_path,
        test_command=settings.test_command,
        test_output_bytes=settings.test_output_bytes,
        rlimits={
            resource.RLIMIT_AS: settings.rlimit_as_bytes,
            resource.RLIMIT_FSIZE: settings.rlimit_fsize_bytes,
            resource.RLIMIT_CPU: settings.rlimit_cpu_s,
            resource.RLIMIT_NOFILE: settings.rlimit_nofile,
        },
        stop_timeout_s=settings.shutdown_grace_s,
    )


def build_backend(settings: SandboxSettings) -> LocalBackend:
    """The backend `settings.sandbox_backend` names (only `local` so far); not started."""
    if settings.sandbox_backend != "local":
        raise ValueError(f"unknown sandbox backend {settings.sandbox_backend!r}")
    return LocalBackend(local_config(settings))


def build_servicer(settings: SandboxSettings) -> tuple[SandboxServicer, LocalBackend]:
    """The servicer and its backend; the caller awaits `backend.start()` / `backend.stop()`."""
    backend = build_backend(settings)
    return SandboxServicer(backend, Limits.from_settings(settings)), backend
