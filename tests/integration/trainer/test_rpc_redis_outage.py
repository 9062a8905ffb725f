"""A trainer RPC while Redis is down answers UNAVAILABLE with a message, not INTERNAL (the
chaos suite's Redis restart met INTERNAL), and works again once Redis is back: the real
TrainerServicer and JobStore behind the real GrpcServer, a real redis-server stopped and
started again on the same port and data (AOF), as a compose restart does."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import redis
import redis.asyncio as aioredis
from submit_fleet import trainer_server
from waiting import wait_for_async

from artfleet.runtime.rpc.client import aio_channel
from artfleet.runtime.service import free_port
from artfleet.specs.job import config_hash, spec_to_proto, validate_spec
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import redis_server_binary
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer

pytestmark = pytest.mark.integration
TOKEN = "redis-outage-token"


@dataclass
class OwnRedis:
    """A redis-server of this test alone (it is stopped mid-test)."""

    binary: str
    data: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        argv += ["--dir", str(self.data), "--save", "", "--appendonly", "yes"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                assert self.proc.poll() is None, "redis-server exited at start"
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


@pytest.fixture
def own_redis(tmp_path: Path, require_infra: Callable[[bool, str], None]) -> Iterator[OwnRedis]:
    try:
        binary = redis_server_binary()
    except RuntimeError as exc:
        require_infra(False, str(exc))
        raise
    server = OwnRedis(binary, tmp_path / "redis", free_port())
    server.data.mkdir()
    server.start()
    yield server
    server.stop()


@pytest.fixture
async def trainer(own_redis: OwnRedis, tmp_path: Path) -> AsyncIterator[tuple[str, JobStore]]:
    client = aioredis.from_url(own_redis.url, socket_timeout=5)
    store = JobStore(client)
    servicer = TrainerServicer(
        store,
        RolloutClient("127.0.0.1:1", TOKEN),  # not used by GetJob/ListJobs
        RewardClient("127.0.0.1:1", TOKEN),
        lambda backend: "",
        art_path=str(tmp_path / "art"),
    )
    server = trainer_server(servicer, TOKEN, "trainer-outage-test")
    await server.start()
    yield f"127.0.0.1:{server.port}", store
    await server.stop(1)
    await client.aclose()


async def test_rpc_during_redis_outage_is_unavailable_then_recovers(
    trainer: tuple[str, JobStore], own_redis: OwnRedis
) -> None:
    target, store = trainer
    spec = validate_spec({"name": "agent"})
    job = await store.create(spec_to_proto(spec), config_hash=config_hash(spec))
    async with aio_channel(target, TOKEN) as channel:
        stub = trainer_pb2_grpc.TrainerStub(channel)
        assert (await stub.GetJob(trainer_pb2.GetJobRequest(job_id=job.id), timeout=30)).id

        own_redis.stop()
        for call in (
            stub.GetJob(trainer_pb2.GetJobRequest(job_id=job.id), timeout=30),
            stub.ListJobs(trainer_pb2.ListJobsRequest(), timeout=30),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value.details()
            assert "Redis is unreachable" in (info.value.details() or "")

        own_redis.start()  # same port and AOF: the job is still there
        reply = await stub.GetJob(trainer_pb2.GetJobRequest(job_id=job.id), timeout=30)
        assert reply.id == job.id


async def test_a_watch_rides_out_a_redis_restart_without_losing_or_repeating_events(
    trainer: tuple[str, JobStore], own_redis: OwnRedis, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis goes away while a WatchJob stream is open (the trainer's read of the job's
    events fails): the stream stays open, and once Redis is back every event comes through
    once, in order, until the job's end. Before the fix the stream ended UNAVAILABLE."""
    target, store = trainer
    spec = validate_spec({"name": "agent"})
    job = await store.create(spec_to_proto(spec), config_hash=config_hash(spec))
    running = pb.ProgressEvent(kind=pb.EVENT_KIND_STATE, state=pb.JOB_STATE_RUNNING)
    await store.emit(job.id, running)
    caplog.set_level(logging.INFO, logger="artfleet_trainer.jobs.store")
    async with aio_channel(target, TOKEN) as channel:
        stub = trainer_pb2_grpc.TrainerStub(channel)
        stream = stub.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=300)
        seen = [await stream.read()]

        async def read_rest() -> None:
            async for event in stream:
                seen.append(event)

        reader = asyncio.create_task(read_rest())
        own_redis.stop()
        # The watch's read of Redis failed at least once (or, on old code, the stream ended).
        await wait_for_async(
            "the watch meeting the outage",
            lambda: reader.done() or "job watch: Redis" in caplog.text,
            timeout_s=120,
        )
        assert not reader.done(), f"the stream ended during the outage: {reader.exception()}"
        own_redis.start()  # same port and AOF, as a compose restart
        for step in (1, 2):
            done = pb.ProgressEvent(kind=pb.EVENT_KIND_STEP_DONE, step=step, total_steps=2)
            await store.emit(job.id, done)
        await store.set_state(job, pb.JOB_STATE_SUCCEEDED)
        await asyncio.wait_for(reader, 120)
    # Every event the job has, each once, in order (the job's own QUEUED one included).
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert len(seen) >= 4
    assert [e.step for e in seen if e.kind == pb.EVENT_KIND_STEP_DONE] == [1, 2]
    assert seen[-1].state == pb.JOB_STATE_SUCCEEDED
