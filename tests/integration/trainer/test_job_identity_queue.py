"""Experiment identity, queue positions and knob rejection at submit, on a real Redis and a
real gRPC server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from artfleet.runtime.config import ServerSettings
from artfleet.runtime.rpc.client import aio_channel
from artfleet.runtime.rpc.server import GrpcServer
from artfleet.specs.job import spec_to_proto, validate_spec
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer

pytestmark = pytest.mark.integration
TOKEN = "identity-test-token"


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[JobStore]:
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    yield JobStore(client)
    await client.aclose()


async def test_queued_jobs_have_positions_in_submission_order(store: JobStore) -> None:
    first = await store.create(pb.JobSpec(name="a", experiment="e1"), config_hash="aaa")
    second = await store.create(pb.JobSpec(name="b", experiment="e2"), config_hash="bbb")
    third = await store.create(pb.JobSpec(name="c"), config_hash="ccc")
    positions = {j.id: j.queue_position for j in await store.list()}
    assert positions == {first.id: 1, second.id: 2, third.id: 3}
    await store.set_state(first, pb.JOB_STATE_RUNNING)
    await store.request_cancel(second.id)  # a queued job leaves the queue at once
    positions = {j.id: j.queue_position for j in await store.list()}
    assert positions == {first.id: 0, second.id: 0, third.id: 1}
    assert (await store.get_with_position(third.id)).queue_position == 1
    assert (await store.next_runnable()).id == first.id  # type: ignore[union-attr]
    assert [j.id for j in await store.list(experiment="e1")] == [first.id]
    assert [j.id for j in await store.list(experiment="default")] == [third.id]
    assert (await store.get(first.id)).config_hash == "aaa"


async def test_a_bad_knob_is_rejected_at_submit_naming_the_field(store: JobStore) -> None:
    servicer = TrainerServicer(
        store,
        # Never reached: the knob is refused before the environment or reward is asked.
        RolloutClient("127.0.0.1:1", TOKEN),
        RewardClient("127.0.0.1:1", TOKEN),
        lambda backend: "",
    )
    settings = ServerSettings(api_token=SecretStr(TOKEN), port=0, metrics_port=0)
    server = GrpcServer(
        settings,
        "trainer-test",
        [lambda s: trainer_pb2_grpc.add_TrainerServicer_to_server(servicer, s)],
        ["artfleet.v1.Trainer"],
    )
    await server.start()
    try:
        async with aio_channel(f"127.0.0.1:{server.port}", TOKEN) as channel:
            stub = trainer_pb2_grpc.TrainerStub(channel)
            refused = spec_to_proto(validate_spec({"grpo": {"kl_penalty_reference_step": 1}}))
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=refused))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "grpo.kl_penalty_reference_step" in (info.value.details() or "")
            out_of_range = pb.JobSpec(grpo=pb.GrpoSpec(advantage_balance=3.0))
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=out_of_range))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "grpo.advantage_balance" in (info.value.details() or "")
        assert await store.list() == []
    finally:
        await server.stop(1)
