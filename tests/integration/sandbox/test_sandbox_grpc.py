"""The Sandbox service over a real gRPC channel, backed by the local backend."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from prometheus_client import REGISTRY
from pydantic import SecretStr

from artfleet.v1 import sandbox_pb2 as pb
from artfleet.v1 import sandbox_pb2_grpc
from artfleet_sandbox.factory import build_servicer
from artfleet_sandbox.settings import DEFAULT_SANDBOX_PATH, SandboxSettings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TEST_FILE = b"""
def test_one():
    assert True

def test_two():
    assert False, "two is wrong"
"""


@pytest.fixture
async def stub() -> AsyncIterator[sandbox_pb2_grpc.SandboxStub]:
    settings = SandboxSettings(
        api_token=SecretStr("integration-test-token"),
        sandbox_backend="local",
        sandbox_allow_unisolated=True,  # machines without bubblewrap still run these
        max_timeout_s=2,
        max_output_bytes=4096,
        max_read_bytes=1024,
        sandbox_path=f"{os.path.dirname(sys.executable)}:{DEFAULT_SANDBOX_PATH}",
        bwrap_expose_paths=[sys.base_prefix, sys.prefix],
    )
    servicer, backend = build_servicer(settings)
    await backend.start()
    server = grpc.aio.server()
    sandbox_pb2_grpc.add_SandboxServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield sandbox_pb2_grpc.SandboxStub(channel)
    finally:
        await server.stop(grace=1)
        await backend.stop()


async def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    return info.value.code()


async def test_every_rpc_round_trip(stub: sandbox_pb2_grpc.SandboxStub) -> None:
    session = await stub.CreateSession(
        pb.CreateSessionRequest(
            files=[pb.File(path="tests/test_x.py", content=TEST_FILE)],
            env={"GREETING": "hello"},
            job_id="job-1",
        )
    )
    assert session.backend == "local" and session.isolation
    assert session.session_id.startswith(session.replica + ".") and len(session.session_id) == 42
    sid = session.session_id

    result = await stub.Exec(
        pb.ExecRequest(session_id=sid, command="echo $GREETING; cat", stdin=b"in")
    )
    assert (result.exit_code, result.stdout, result.timed_out) == (0, b"hello\nin", False)

    written = await stub.WriteFiles(
        pb.WriteFilesRequest(session_id=sid, files=[pb.File(path="a/b.txt", content=b"data")])
    )
    assert written.written == 1
    read = await stub.ReadFile(pb.ReadFileRequest(session_id=sid, path="a/b.txt"))
    assert (read.content, read.truncated) == (b"data", False)

    report = await stub.RunTests(pb.RunTestsRequest(session_id=sid))
    assert (report.passed, report.failed, report.total, report.exit_code) == (1, 1, 2, 1)
    failed = next(t for t in report.tests if t.outcome == "failed")
    assert failed.name.endswith("test_two") and "two is wrong" in failed.message

    assert (await stub.CloseSession(pb.CloseSessionRequest(session_id=sid))).closed
    assert not (await stub.CloseSession(pb.CloseSessionRequest(session_id=sid))).closed
    missing = stub.Exec(pb.ExecRequest(session_id=sid, command="true"))
    assert await _code(missing) == grpc.StatusCode.NOT_FOUND


async def test_bad_input_gets_clear_codes(stub: sandbox_pb2_grpc.SandboxStub) -> None:
    sid = (await stub.CreateSession(pb.CreateSessionRequest())).session_id
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    cases = {
        "empty command": stub.Exec(pb.ExecRequest(session_id=sid, command=" ")),
        "negative timeout": stub.Exec(pb.ExecRequest(session_id=sid, command="true", timeout_s=-1)),
        "negative output": stub.Exec(
            pb.ExecRequest(session_id=sid, command="true", max_output_bytes=-5)
        ),
        "cwd escape": stub.Exec(pb.ExecRequest(session_id=sid, command="true", cwd="../..")),
        "no session id": stub.Exec(pb.ExecRequest(command="true")),
        "absolute write": stub.WriteFiles(
            pb.WriteFilesRequest(session_id=sid, files=[pb.File(path="/etc/x", content=b"")])
        ),
        "climbing read": stub.ReadFile(pb.ReadFileRequest(session_id=sid, path="../secret")),
        "negative ttl": stub.CreateSession(pb.CreateSessionRequest(idle_ttl_s=-1)),
        "bad env name": stub.CreateSession(pb.CreateSessionRequest(env={"A=B": "x"})),
        "negative test timeout": stub.RunTests(pb.RunTestsRequest(session_id=sid, timeout_s=-2)),
    }
    for name, call in cases.items():
        assert await _code(call) == invalid, name
    not_found = grpc.StatusCode.NOT_FOUND
    assert await _code(stub.ReadFile(pb.ReadFileRequest(session_id=sid, path="nope"))) == not_found
    unknown = stub.Exec(pb.ExecRequest(session_id="0" * 32, command="true"))
    assert await _code(unknown) == not_found
    unknown_tests = stub.RunTests(pb.RunTestsRequest(session_id="feed"))
    assert await _code(unknown_tests) == not_found


async def test_requests_above_caps_are_clamped(stub: sandbox_pb2_grpc.SandboxStub) -> None:
    sid = (await stub.CreateSession(pb.CreateSessionRequest())).session_id
    before = REGISTRY.get_sample_value("artfleet_sandbox_exec_timeouts_total") or 0
    started = time.monotonic()
    slow = await stub.Exec(pb.ExecRequest(session_id=sid, command="sleep 20", timeout_s=3600))
    assert slow.timed_out and slow.exit_code == -1 and time.monotonic() - started < 10
    after = REGISTRY.get_sample_value("artfleet_sandbox_exec_timeouts_total") or 0
    assert after == before + 1

    big = await stub.Exec(
        pb.ExecRequest(session_id=sid, command="head -c 100000 /dev/zero", max_output_bytes=10**9)
    )
    assert len(big.stdout) == 4096 and big.stdout_truncated

    await stub.Exec(pb.ExecRequest(session_id=sid, command="head -c 5000 /dev/zero > f"))
    read = await stub.ReadFile(pb.ReadFileRequest(session_id=sid, path="f", max_bytes=10**9))
    assert len(read.content) == 1024 and read.truncated
    small = await stub.ReadFile(pb.ReadFileRequest(session_id=sid, path="f", max_bytes=10))
    assert len(small.content) == 10 and small.truncated


async def test_metrics_follow_the_calls(stub: sandbox_pb2_grpc.SandboxStub) -> None:
    def sample(name: str, labels: dict[str, str] | None = None) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    repl = {"mode": "repl"}  # sessions run Exec in their REPL by default

    created = sample("artfleet_sandbox_sessions_created_total")
    execs = sample("artfleet_sandbox_exec_seconds_count", repl)
    test_runs = sample("artfleet_sandbox_run_tests_seconds_count")
    sid = (await stub.CreateSession(pb.CreateSessionRequest())).session_id
    assert sample("artfleet_sandbox_active_sessions") >= 1
    await stub.Exec(pb.ExecRequest(session_id=sid, command="true"))
    await stub.RunTests(pb.RunTestsRequest(session_id=sid, command="true"))
    assert sample("artfleet_sandbox_sessions_created_total") == created + 1
    assert sample("artfleet_sandbox_exec_seconds_count", repl) == execs + 1
    assert sample("artfleet_sandbox_run_tests_seconds_count") == test_runs + 1
