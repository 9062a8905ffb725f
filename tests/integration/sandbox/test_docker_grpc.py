"""The Sandbox API end to end: a real service (auth, health) over real Docker containers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY
from sandbox_docker_kit import TOKEN, AppFactory, our_containers

from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import sandbox_pb2 as pb
from artfleet.v1 import sandbox_pb2_grpc
from artfleet_sandbox.__main__ import SandboxApp
from artfleet_sandbox.docker_backend.config import (
    LABEL_CREATED_AT,
    LABEL_JOB,
    LABEL_REPLICA,
    LABEL_SESSION,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TESTS = b"""
def test_one():
    assert 1 + 1 == 2

def test_two():
    assert False, "two is wrong"

def test_three():
    raise RuntimeError("boom")
"""


@pytest.fixture
async def app(sandbox_app: AppFactory) -> AsyncIterator[SandboxApp]:
    async with sandbox_app(max_output_bytes=4096, max_read_bytes=1024) as running:
        yield running


@pytest.fixture
async def stub(app: SandboxApp) -> AsyncIterator[sandbox_pb2_grpc.SandboxStub]:
    async with aio_channel(f"127.0.0.1:{app.server.port}", TOKEN) as channel:
        yield sandbox_pb2_grpc.SandboxStub(channel)


async def _error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


def _sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


async def test_session_lifecycle_through_grpc(
    stub: sandbox_pb2_grpc.SandboxStub, app: SandboxApp, docker_client: Any, deployment: str
) -> None:
    session = await stub.CreateSession(
        pb.CreateSessionRequest(
            files=[pb.File(path="tests/test_x.py", content=TESTS)],
            env={"GREETING": "hello"},
            job_id="job-42",
        )
    )
    assert session.backend == "docker" and "no network" in session.isolation
    assert session.session_id.startswith(session.replica + ".")
    sid = session.session_id

    # Labels name the owner replica, session and creation time; cold sessions their job.
    container = next(
        c for c in our_containers(docker_client, deployment) if c.labels[LABEL_SESSION] == sid
    )
    assert container.labels[LABEL_REPLICA] == session.replica
    assert int(container.labels[LABEL_CREATED_AT]) > 0
    assert container.labels[LABEL_JOB] in ("job-42", "")  # "" when it came from the pool

    out = await stub.Exec(
        pb.ExecRequest(session_id=sid, command="echo $GREETING $WHO; pwd", env={"WHO": "there"})
    )
    assert out.exit_code == 0 and out.stdout == b"hello there\n/workspace\n"

    out = await stub.Exec(
        pb.ExecRequest(session_id=sid, command="cat; echo oops >&2; exit 3", stdin=b"from stdin")
    )
    assert (out.exit_code, out.stdout, out.stderr) == (3, b"from stdin", b"oops\n")

    out = await stub.Exec(pb.ExecRequest(session_id=sid, command="pwd", cwd="tests"))
    assert out.stdout == b"/workspace/tests\n"

    written = await stub.WriteFiles(
        pb.WriteFilesRequest(
            session_id=sid,
            files=[pb.File(path="bin/run.sh", content=b"#!/bin/sh\necho ran\n", mode=0o755)],
        )
    )
    assert written.written == 1
    out = await stub.Exec(pb.ExecRequest(session_id=sid, command="./bin/run.sh && id -u"))
    assert out.stdout == b"ran\n1000\n"

    read = await stub.ReadFile(pb.ReadFileRequest(session_id=sid, path="tests/test_x.py"))
    assert read.content == TESTS[:1024] and read.truncated == (len(TESTS) > 1024)
    small = await stub.ReadFile(pb.ReadFileRequest(session_id=sid, path="bin/run.sh", max_bytes=5))
    assert small.content == b"#!/bi" and small.truncated

    report = await stub.RunTests(pb.RunTestsRequest(session_id=sid))
    assert (report.passed, report.failed, report.errored, report.total) == (1, 2, 0, 3)
    outcomes = {case.name.rsplit(":", 1)[-1]: case.outcome for case in report.tests}
    assert outcomes == {"test_one": "passed", "test_two": "failed", "test_three": "failed"}
    assert "two is wrong" in report.output and report.exit_code == 1

    closed = await stub.CloseSession(pb.CloseSessionRequest(session_id=sid))
    assert closed.closed
    again = await stub.CloseSession(pb.CloseSessionRequest(session_id=sid))
    assert not again.closed
    assert all(c.labels[LABEL_SESSION] != sid for c in our_containers(docker_client, deployment))
    err = await _error(stub.Exec(pb.ExecRequest(session_id=sid, command="true")))
    assert err.code() == grpc.StatusCode.NOT_FOUND


async def test_bad_requests_get_clear_statuses(stub: sandbox_pb2_grpc.SandboxStub) -> None:
    err = await _error(stub.CreateSession(pb.CreateSessionRequest(image="artfleet/no-such:image")))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "not on the sandbox" in err.details()
    err = await _error(
        stub.CreateSession(pb.CreateSessionRequest(resources=pb.Resources(memory_bytes=-1)))
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "memory_bytes" in err.details()
    err = await _error(stub.CreateSession(pb.CreateSessionRequest(env={"1BAD": "x"})))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT

    sid = (await stub.CreateSession(pb.CreateSessionRequest())).session_id
    try:
        for path in ("/etc/passwd", "../x", ""):
            err = await _error(stub.ReadFile(pb.ReadFileRequest(session_id=sid, path=path)))
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, path
        err = await _error(stub.ReadFile(pb.ReadFileRequest(session_id=sid, path="missing.txt")))
        assert err.code() == grpc.StatusCode.NOT_FOUND
        err = await _error(stub.ReadFile(pb.ReadFileRequest(session_id=sid, path=".")))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        err = await _error(stub.Exec(pb.ExecRequest(session_id=sid, command="  ")))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        err = await _error(stub.Exec(pb.ExecRequest(session_id=sid, command="ls", cwd="../..")))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        err = await _error(
            stub.WriteFiles(pb.WriteFilesRequest(session_id=sid, files=[pb.File(path="/x")]))
        )
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        other = "r0000beef." + "0" * 32
        err = await _error(stub.Exec(pb.ExecRequest(session_id=other, command="true")))
        assert err.code() == grpc.StatusCode.UNAVAILABLE and "r0000beef" in err.details()
    finally:
        await stub.CloseSession(pb.CloseSessionRequest(session_id=sid))


async def test_every_rpc_needs_the_token(app: SandboxApp) -> None:
    async with aio_channel(f"127.0.0.1:{app.server.port}", "wrong-token") as channel:
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        err = await _error(stub.CreateSession(pb.CreateSessionRequest()))
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_network_is_opt_in_and_policy_bound(
    sandbox_app: AppFactory, docker_client: Any
) -> None:
    async with (
        sandbox_app(allow_network=False) as app,
        aio_channel(f"127.0.0.1:{app.server.port}", TOKEN) as channel,
    ):
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        err = await _error(stub.CreateSession(pb.CreateSessionRequest(network=True)))
        assert err.code() == grpc.StatusCode.PERMISSION_DENIED and "network" in err.details()
    async with (
        sandbox_app(allow_network=True) as app,
        aio_channel(f"127.0.0.1:{app.server.port}", TOKEN) as channel,
    ):
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        session = await stub.CreateSession(pb.CreateSessionRequest(network=True))
        assert "(network" in session.isolation
        out = await stub.Exec(
            pb.ExecRequest(session_id=session.session_id, command="cat /proc/net/dev | wc -l")
        )
        # A network session has an interface besides loopback (3 header+lo lines otherwise).
        assert int(out.stdout) > 3


async def test_per_session_resources_are_clamped_to_the_deployment_caps(
    sandbox_app: AppFactory, docker_client: Any, deployment: str
) -> None:
    async with (
        sandbox_app(max_memory_bytes=512 * 1024 * 1024, max_pids=100) as app,
        aio_channel(f"127.0.0.1:{app.server.port}", TOKEN) as channel,
    ):
        stub = sandbox_pb2_grpc.SandboxStub(channel)
        session = await stub.CreateSession(
            pb.CreateSessionRequest(
                resources=pb.Resources(memory_bytes=64 << 30, pids=64, cpus=0.5)
            )
        )
        container = next(
            c
            for c in our_containers(docker_client, deployment)
            if c.labels[LABEL_SESSION] == session.session_id
        )
        host = container.attrs["HostConfig"]
        assert host["Memory"] == 512 * 1024 * 1024 == host["MemorySwap"]
        assert host["PidsLimit"] == 64 and host["NanoCpus"] == 500_000_000
        assert host["ReadonlyRootfs"] and host["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in host["SecurityOpt"] and host["NetworkMode"] == "none"


async def test_the_warm_pool_serves_sessions_and_refills(
    stub: sandbox_pb2_grpc.SandboxStub, app: SandboxApp
) -> None:
    backend: Any = app.backend
    image = backend.config.default_image
    await _wait_for(lambda: _sample("artfleet_sandbox_pool_size", {"image": image}) >= 1)
    hits = _sample("artfleet_sandbox_pool_hits_total", {"image": image})
    session = await stub.CreateSession(pb.CreateSessionRequest(job_id="pooled-job"))
    assert _sample("artfleet_sandbox_pool_hits_total", {"image": image}) == hits + 1
    out = await stub.Exec(pb.ExecRequest(session_id=session.session_id, command="ls -A | wc -l"))
    assert out.stdout == b"0\n"  # a pooled workspace starts empty
    await _wait_for(lambda: _sample("artfleet_sandbox_pool_size", {"image": image}) >= 1)
    await stub.CloseSession(pb.CloseSessionRequest(session_id=session.session_id))


async def _wait_for(condition: Any, timeout_s: float = 60.0) -> None:
    import asyncio
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)
