"""The reaper and shutdown against real containers: what is removed, and what never is."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from typing import Any

import pytest
from prometheus_client import REGISTRY
from sandbox_docker_kit import TEST_IMAGE, TOKEN, BackendFactory, our_containers
from waiting import wait_for_async

from artfleet.runtime.rpc.client import aio_channel
from artfleet.runtime.service import free_port
from artfleet.v1 import sandbox_pb2 as pb
from artfleet.v1 import sandbox_pb2_grpc
from artfleet_sandbox.backend import ExecSpec, SessionSpec
from artfleet_sandbox.docker_backend.config import (
    LABEL_CREATED_AT,
    LABEL_DEPLOYMENT,
    LABEL_MANAGED,
    LABEL_REPLICA,
    LABEL_SESSION,
)
from artfleet_sandbox.docker_backend.reaper import STALE_AFTER_S
from artfleet_sandbox.docker_backend.spec import ContainerRequest, container_options
from artfleet_sandbox.replica import new_session_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _reaped(reason: str) -> float:
    return (
        REGISTRY.get_sample_value("artfleet_sandbox_reaped_sessions_total", {"reason": reason}) or 0
    )


def _sessions(docker_client: Any, deployment: str) -> set[str]:
    return {c.labels[LABEL_SESSION] for c in our_containers(docker_client, deployment)}


async def _wait_healthy(port: int, proc: asyncio.subprocess.Process) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + 60
    async with aio_channel(f"127.0.0.1:{port}", TOKEN) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while True:
            assert proc.returncode is None, "the sandbox service exited"
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except Exception:
                pass
            assert time.monotonic() < deadline, "the sandbox service did not become healthy"
            await asyncio.sleep(0.2)


async def _reaped_by_passes(backend: Any, docker_client: Any, deployment: str) -> None:
    """Reaper passes until no container of the deployment is left (the new replica's pool
    is empty: pool_size 0); a failure lists what stayed, with the labels that decided it."""
    deadline = time.monotonic() + 120
    while _sessions(docker_client, deployment):
        if time.monotonic() > deadline:
            left = {c.short_id: c.labels for c in our_containers(docker_client, deployment)}
            raise AssertionError(f"not reaped: {left}; this replica: {backend.identity}")
        await asyncio.sleep(0.5)
        await backend.reap()


async def test_containers_of_a_dead_replica_are_reaped_at_start(
    docker_backend: BackendFactory, docker_client: Any, deployment: str
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "ARTFLEET_API_TOKEN": TOKEN,
        "ARTFLEET_SANDBOX_BACKEND": "docker",
        "ARTFLEET_DEPLOYMENT": deployment,
        "ARTFLEET_SANDBOX_IMAGE": TEST_IMAGE,
        "ARTFLEET_PORT": str(port),
        "ARTFLEET_POOL_SIZE": "1",
    }
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "artfleet_sandbox", env=env)
    try:
        await _wait_healthy(port, proc)
        async with aio_channel(f"127.0.0.1:{port}", TOKEN) as channel:
            stub = sandbox_pb2_grpc.SandboxStub(channel)
            session = await stub.CreateSession(pb.CreateSessionRequest(job_id="doomed"))
    finally:
        proc.send_signal(signal.SIGKILL)  # a crash: no graceful shutdown removes anything
        await asyncio.wait_for(proc.wait(), 30)
    assert session.session_id in _sessions(docker_client, deployment)

    # Containers that are not ours: no labels at all, and ours but another deployment.
    stranger = docker_client.containers.run(TEST_IMAGE, ["sleep", "300"], detach=True)
    neighbour = docker_client.containers.run(
        TEST_IMAGE,
        ["sleep", "300"],
        detach=True,
        labels={LABEL_MANAGED: "sandbox", LABEL_DEPLOYMENT: f"{deployment}-other"},
    )
    try:
        before = _reaped("orphan")
        async with docker_backend() as backend:
            # The start's pass removes what it finds; a container the engine was still
            # creating or starting for the killed replica goes at a later pass, as it would
            # with the periodic reaper (here every pass is the test's own).
            await _reaped_by_passes(backend, docker_client, deployment)
            assert _reaped("orphan") - before >= 1
            assert backend.replica_id != session.replica
        stranger.reload()
        neighbour.reload()
        assert stranger.status == "running" and neighbour.status == "running"
    finally:
        stranger.remove(force=True)
        neighbour.remove(force=True)


async def test_idle_expiry_and_stale_containers(
    docker_backend: BackendFactory, docker_client: Any, deployment: str
) -> None:
    # Only lower bounds on time here: however slow the engine, every wait below makes a
    # condition true that stays true (a session idle past its TTL, a label 2x too old).
    # A max lifetime that could also expire meanwhile would take precedence over idle:
    # it is far away in this test and covered by the next one.
    async with docker_backend(max_lifetime_s=3600.0) as backend:
        idle = await backend.create_session(SessionSpec(idle_ttl_s=0.5))
        kept = await backend.create_session(SessionSpec(idle_ttl_s=3600.0))
        # A container with this replica's labels that no session knows (a create that
        # crashed half way): stale.
        stray_id = new_session_id(backend.replica_id)
        request = ContainerRequest(stray_id, TEST_IMAGE, backend.config.defaults, False)
        options = container_options(request, backend.config, backend.identity)
        young = dict(options, name=f"young-{stray_id[-8:]}")
        options["labels"][LABEL_CREATED_AT] = str(int(time.time() - 2 * STALE_AFTER_S))
        docker_client.containers.run(**options)
        young_id = new_session_id(backend.replica_id)  # just created: not stale yet
        young["labels"] = dict(
            options["labels"], **{LABEL_SESSION: young_id, LABEL_CREATED_AT: str(int(time.time()))}
        )
        young_container = docker_client.containers.run(**young)
        await asyncio.sleep(0.6)  # > the idle session's TTL since its last use
        counts = {reason: _reaped(reason) for reason in ("idle", "lifetime", "stale")}
        await backend.reap()
        left = _sessions(docker_client, deployment)
        young_container.remove(force=True, v=True)
        assert idle.session_id not in left and stray_id not in left
        assert kept.session_id in left and young_id in left
        assert _reaped("idle") == counts["idle"] + 1
        assert _reaped("stale") == counts["stale"] + 1
        assert _reaped("lifetime") == counts["lifetime"]


async def test_lifetime_expiry_even_when_recently_used(
    docker_backend: BackendFactory, docker_client: Any, deployment: str
) -> None:
    async with docker_backend(max_lifetime_s=1.0) as backend:
        session = await backend.create_session(SessionSpec(idle_ttl_s=3600.0))
        created = time.monotonic()
        while time.monotonic() - created <= 1.1:  # past the lifetime, used all along
            await backend.exec(
                session.session_id, ExecSpec(command="true", timeout_s=30, max_output_bytes=1024)
            )
        before = _reaped("lifetime")
        await backend.reap()
        assert session.session_id not in _sessions(docker_client, deployment)
        assert _reaped("lifetime") == before + 1


async def test_graceful_stop_removes_only_this_replicas_containers(
    docker_backend: BackendFactory, docker_client: Any, deployment: str
) -> None:
    async with docker_backend(pool_size=1, pool_images=(TEST_IMAGE,)) as other:
        async with docker_backend(pool_size=2, pool_images=(TEST_IMAGE,)) as backend:
            await backend.create_session(SessionSpec(job_id="a"))
            await backend.create_session(SessionSpec(job_id="b"))
            kept = await other.create_session(SessionSpec())

            def mine() -> list[Any]:
                return [
                    c
                    for c in our_containers(docker_client, deployment)
                    if c.labels[LABEL_REPLICA] == backend.replica_id
                ]

            # the pool refills in the background; a busy engine is slow
            await wait_for_async("two sessions and a full pool", lambda: len(mine()) >= 4)
        owners = {c.labels[LABEL_REPLICA] for c in our_containers(docker_client, deployment)}
        assert owners == {other.replica_id}
        assert kept.session_id in _sessions(docker_client, deployment)
    assert _sessions(docker_client, deployment) == set()
