"""The `docker` backend: one container per session, a warm pool, and a label-based reaper."""

from artfleet_sandbox.docker_backend.backend import DockerBackend
from artfleet_sandbox.docker_backend.config import DockerConfig

__all__ = ["DockerBackend", "DockerConfig"]
