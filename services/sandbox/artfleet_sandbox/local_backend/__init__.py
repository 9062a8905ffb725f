"""The `local` backend: one temporary directory per session, commands as host processes."""

from artfleet_sandbox.local_backend.backend import LocalBackend
from artfleet_sandbox.local_backend.config import LocalConfig

__all__ = ["LocalBackend", "LocalConfig"]
