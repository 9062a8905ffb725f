"""The shared server bootstrap on a real grpc.aio server: health, auth, error mapping,
metrics, bounded shutdown."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import SecretStr

from artfleet.contracts.errors import InvalidArgument, NotFound
from artfleet.runtime.config import ServerSettings
from artfleet.runtime.rpc.client import aio_channel
from artfleet.runtime.rpc.server import GrpcServer
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc

TOKEN = "test-token-123"


class _Servicer(trainer_pb2_grpc.TrainerServicer):
    async def GetJob(self, request: trainer_pb2.GetJobRequest, context: object) -> pb.Job:
        if request.job_id == "missing":
            raise NotFound("no job with id 'missing'")
        if request.job_id == "boom":
            raise RuntimeError("secret internals")
        if request.job_id == "slow":
            await asyncio.sleep(30)
        return pb.Job(id=request.job_id)

    async def WatchJob(
        self, request: trainer_pb2.WatchJobRequest, context: object
    ) -> AsyncIterator[pb.ProgressEvent]:
        yield pb.ProgressEvent(seq=1)
        raise InvalidArgument("must be >= 0", "from_seq")


@pytest.fixture
async def server() -> AsyncIterator[GrpcServer]:
    settings = ServerSettings(api_token=SecretStr(TOKEN), port=0, metrics_port=0)
    servicer = _Servicer()
    srv = GrpcServer(
        settings,
        "test",
        [lambda s: trainer_pb2_grpc.add_TrainerServicer_to_server(servicer, s)],
        ["artfleet.v1.Trainer"],
    )
    await srv.start()
    yield srv
    await srv.stop(1)


async def _health(port: int) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="artfleet.v1.Trainer")
        )
        return int(reply.status)


async def test_health_says_serving_only_when_ready(server: GrpcServer) -> None:
    assert await _health(server.port) == health_pb2.HealthCheckResponse.NOT_SERVING
    await server.set_serving(True)
    assert await _health(server.port) == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("token", ["", "wrong"])
async def test_missing_or_wrong_token_is_unauthenticated(server: GrpcServer, token: str) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = trainer_pb2_grpc.TrainerStub(channel)
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.GetJob(trainer_pb2.GetJobRequest(job_id="x"), metadata=metadata)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_errors_map_to_status_codes(server: GrpcServer) -> None:
    async with aio_channel(f"127.0.0.1:{server.port}", TOKEN) as channel:
        stub = trainer_pb2_grpc.TrainerStub(channel)
        assert (await stub.GetJob(trainer_pb2.GetJobRequest(job_id="ok"))).id == "ok"
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.GetJob(trainer_pb2.GetJobRequest(job_id="missing"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.GetJob(trainer_pb2.GetJobRequest(job_id="boom"))
        assert info.value.code() == grpc.StatusCode.INTERNAL
        assert "secret internals" not in (info.value.details() or "")
        events = []
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for event in stub.WatchJob(trainer_pb2.WatchJobRequest()):
                events.append(event)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == "from_seq: must be >= 0"
    url = f"http://127.0.0.1:{server.metrics.port}/metrics"
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(url).read())
    assert b'artfleet_rpc_requests_total{code="NOT_FOUND",method="GetJob",service="test"}' in body


async def test_stop_is_bounded_by_the_grace(server: GrpcServer) -> None:
    async with aio_channel(f"127.0.0.1:{server.port}", TOKEN) as channel:
        call = trainer_pb2_grpc.TrainerStub(channel).GetJob(
            trainer_pb2.GetJobRequest(job_id="slow")
        )
        await asyncio.sleep(0.2)
        loop = asyncio.get_running_loop()
        start = loop.time()
        await server.stop(0.5)
        assert loop.time() - start < 5
        with pytest.raises(grpc.aio.AioRpcError):
            await call


@pytest.mark.parametrize(
    "raw", [b"\x0a\x02\xff\xfe", b"\xff\xff\xff"], ids=["bad-utf8-string", "corrupt-wire"]
)
async def test_undecodable_requests_are_invalid_argument(server: GrpcServer, raw: bytes) -> None:
    # No client library sends these; grpc alone would answer UNKNOWN with a parser message.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        metadata = (("authorization", f"Bearer {TOKEN}"),)
        for call in (
            channel.unary_unary("/artfleet.v1.Trainer/GetJob")(raw, metadata=metadata),
            _drain(channel.unary_stream("/artfleet.v1.Trainer/WatchJob")(raw, metadata=metadata)),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert (info.value.details() or "").startswith("request is not a valid message: ")


async def _drain(stream: AsyncIterator[object]) -> None:
    async for _ in stream:
        pass


async def test_a_second_server_on_a_taken_port_fails_to_start(server: GrpcServer) -> None:
    # gRPC's default SO_REUSEPORT would let both bind and split the connections.
    settings = ServerSettings(api_token=SecretStr(TOKEN), port=server.port, metrics_port=0)
    second = GrpcServer(settings, "test", [], [])
    with pytest.raises(RuntimeError):
        await second.start()
    assert await _health(server.port) == health_pb2.HealthCheckResponse.NOT_SERVING
