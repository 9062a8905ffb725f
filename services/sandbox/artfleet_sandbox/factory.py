"""Wiring: settings → backend → servicer. The process entrypoint lives elsewhere."""

from __future__ import annotations

import logging
import resource

from artfleet_sandbox.backend import Resources, SandboxBackend
from artfleet_sandbox.docker_backend import DockerBackend, DockerConfig
from artfleet_sandbox.local_backend import LocalBackend, LocalConfig
from artfleet_sandbox.replica import new_replica_id
from artfleet_sandbox.servicer import Limits, SandboxServicer
from artfleet_sandbox.settings import SandboxSettings

log = logging.getLogger(__name__)


def local_config(settings: SandboxSettings, replica_id: str = "") -> LocalConfig:
    uid, gid = settings.sandbox_run_as.split(":")
    return LocalConfig(
        replica_id=replica_id,
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
        cache_dir=settings.cache_dir,
        repo_pool_size=settings.pool_size,
        session_pool_size=settings.pool_size,
        test_runtime=settings.test_runtime,
        allow_stdio=settings.allow_local_stdio,
        allow_unisolated=settings.sandbox_allow_unisolated,
        run_as=(int(uid), int(gid)),
    )


def docker_config(settings: SandboxSettings, replica_id: str = "") -> DockerConfig:
    return DockerConfig(
        deployment=settings.deployment,
        replica_id=replica_id,
        docker_host=settings.docker_host,
        default_image=settings.sandbox_image,
        defaults=Resources(settings.memory_bytes, settings.cpus, settings.pids, settings.tmp_bytes),
        caps=Resources(
            settings.max_memory_bytes, settings.max_cpus, settings.max_pids, settings.max_tmp_bytes
        ),
        allow_network=settings.allow_network,
        network=settings.sandbox_network,
        user=settings.sandbox_user,
        idle_ttl_s=settings.idle_ttl_s,
        max_lifetime_s=settings.max_lifetime_s,
        reap_interval_s=settings.reap_interval_s,
        max_sessions=settings.max_sessions,
        pool_size=settings.pool_size,
        pool_images=(settings.sandbox_image, *settings.pool_images),
        pool_max_age_s=settings.pool_max_age_s,
        pool_max_images=settings.pool_max_images,
        pull=settings.pull_images,
        test_output_bytes=settings.test_output_bytes,
        drain_limit_bytes=settings.drain_limit_bytes,
        threads=settings.docker_threads,
        cache_dir=settings.cache_dir,
        stop_timeout_s=settings.shutdown_grace_s,
    )


def docker_usable(docker_host: str, image: str) -> str:
    """ "" when the engine answers and has `image`, else why not."""
    import docker

    try:
        client = docker.DockerClient(base_url=docker_host) if docker_host else docker.from_env()
    except Exception as exc:  # no socket, no permission: both mean "not here"
        return f"no Docker engine ({exc})"
    try:
        client.ping()
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return f"image {image} is not on the engine (scripts/build_base_image.sh builds it)"
    except Exception as exc:
        return f"Docker engine unusable ({exc})"
    finally:
        client.close()
    return ""


def build_backend(settings: SandboxSettings) -> SandboxBackend:
    """The backend `settings.sandbox_backend` names (auto: docker when reachable); not started."""
    kind = settings.sandbox_backend
    if kind == "auto":
        why_not = docker_usable(settings.docker_host, settings.sandbox_image)
        kind = "local" if why_not else "docker"
        log.info("sandbox backend: %s (auto%s)", kind, f": {why_not}" if why_not else "")
    replica_id = new_replica_id()
    if kind == "docker":
        return DockerBackend(docker_config(settings, replica_id))
    return LocalBackend(local_config(settings, replica_id))


def build_servicer(settings: SandboxSettings) -> tuple[SandboxServicer, SandboxBackend]:
    """The servicer and its backend; the caller awaits `backend.start()` / `backend.stop()`."""
    backend = build_backend(settings)
    return SandboxServicer(backend, Limits.from_settings(settings)), backend
