"""ArtFleet sandbox service: isolated workspaces where agents run commands and tests."""

from artfleet_sandbox.backend import (
    ExecOutcome,
    ExecSpec,
    FileSpec,
    InvalidArgument,
    InvalidPath,
    NotFound,
    SandboxBackend,
    SandboxError,
    SessionInfo,
    SessionNotFound,
    SessionSpec,
)

__all__ = [
    "ExecOutcome",
    "ExecSpec",
    "FileSpec",
    "InvalidArgument",
    "InvalidPath",
    "NotFound",
    "SandboxBackend",
    "SandboxError",
    "SessionInfo",
    "SessionNotFound",
    "SessionSpec",
]
