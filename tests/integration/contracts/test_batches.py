"""The step-batch contract (artfleet.contracts.batches) against a real redis-server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from artfleet.contracts import batches
from artfleet.contracts.batches import Claim, Published, QuorumNotReached, StepBatches, StepKeys
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2

pytestmark = pytest.mark.integration


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def store(client: aioredis.Redis) -> StepBatches:
    return StepBatches(client, wake_s=0.5)


@pytest.fixture
def job() -> str:
    return uuid.uuid4().hex[:12]


def choice(turn: int, tokens: int) -> pb.Choice:
    return pb.Choice(
        finish_reason="stop",
        message=pb.ChatMessage(role="assistant", content=f"THOUGHT: turn {turn}"),
        has_logprobs=True,
        logprobs=[pb.TokenLogprob(token=f"token_id:{i}", logprob=-0.1 * i) for i in range(tokens)],
        has_token_ids=True,
        prompt_token_ids=list(range(50 * (turn + 1))),
        token_ids=list(range(tokens)),
    )


def scored(trajectories: int = 2, turns: int = 1, tokens: int = 3) -> rollout_pb2.RunGroupResponse:
    items = []
    for turn in range(turns):
        items.append(pb.MessageOrChoice(message=pb.ChatMessage(role="user", content="obs")))
        items.append(pb.MessageOrChoice(choice=choice(turn, tokens)))
    group = pb.TrajectoryGroup(
        trajectories=[
            pb.Trajectory(messages_and_choices=items, reward=float(i)) for i in range(trajectories)
        ]
    )
    return rollout_pb2.RunGroupResponse(group=group, episodes=[pb.Episode(turns=turns)])


def failed(why: str = "boom") -> rollout_pb2.RunGroupResponse:
    group = pb.TrajectoryGroup(exceptions=[pb.RolloutException(type="RuntimeError", message=why)])
    return rollout_pb2.RunGroupResponse(group=group)


def dropped() -> rollout_pb2.RunGroupResponse:
    return rollout_pb2.RunGroupResponse(outcome=pb.RewardOutcome(group_dropped=True))


def fail_job(reason: str) -> rollout_pb2.RunGroupResponse:
    return rollout_pb2.RunGroupResponse(outcome=pb.RewardOutcome(fail_job=reason))


async def test_a_redelivered_group_is_stored_once(store: StepBatches, job: str) -> None:
    assert await store.needs_run(job, 1, "g0")
    assert await store.publish(job, 1, "g0", scored()) is Published.STORED
    assert not await store.needs_run(job, 1, "g0")  # the redelivered task skips the group
    assert await store.publish(job, 1, "g0", scored(trajectories=3)) is Published.KEPT
    [entry] = await store.read(job, 1, ["g0"])
    assert entry.state == batches.SCORED and len(entry.group.trajectories) == 2


async def test_two_workers_finishing_the_same_group_count_once(
    store: StepBatches, job: str
) -> None:
    replies = await asyncio.gather(*(store.publish(job, 1, "g0", scored()) for _ in range(8)))
    assert replies.count(Published.STORED) == 1
    progress = await store.progress(job, 1, ["g0", "g1"])
    assert progress.answered == 1 and not progress.complete


async def test_a_failure_never_replaces_a_scored_group(store: StepBatches, job: str) -> None:
    assert await store.publish(job, 1, "g0", scored()) is Published.STORED
    assert await store.publish(job, 1, "g0", failed()) is Published.KEPT
    assert await store.publish(job, 1, "g0", dropped()) is Published.KEPT
    # ... nor another failure; and a scored group replaces a failure.
    assert await store.publish(job, 1, "g1", failed("first")) is Published.STORED
    assert await store.publish(job, 1, "g1", failed("second")) is Published.KEPT
    assert await store.needs_run(job, 1, "g1")  # a failure may run again
    assert await store.publish(job, 1, "g1", scored()) is Published.STORED
    entries = await store.read(job, 1, ["g0", "g1"])
    assert [e.state for e in entries] == [batches.SCORED, batches.SCORED]


async def test_only_what_the_trainer_reads_is_stored(store: StepBatches, job: str) -> None:
    response = scored()
    response.outcome.failures.add(scorer="ruler", type="timeout")
    await store.publish(job, 1, "g0", response)
    [entry] = await store.read(job, 1, ["g0"])
    assert entry.group == response.group and entry.outcome == response.outcome
    assert entry.group_id == "g0" and not hasattr(entry, "episodes")


async def test_restart_drops_failures_and_keeps_scored_groups(store: StepBatches, job: str) -> None:
    await store.publish(job, 2, "scored", scored())
    await store.publish(job, 2, "failed", failed())
    await store.publish(job, 2, "dropped", dropped())
    await store.publish(job, 2, "fail_job", fail_job("judge down"))
    assert await store.restart(job, 2) == {"scored", "fail_job"}
    progress = await store.progress(job, 2, ["scored", "failed", "dropped", "fail_job"])
    assert set(progress.states) == {"scored", "fail_job"}
    assert [e.group_id for e in await store.read(job, 2, ["failed", "dropped"])] == []


async def test_gather_returns_as_soon_as_every_group_answered(store: StepBatches, job: str) -> None:
    ids = [f"g{i}" for i in range(3)]

    async def workers() -> None:
        for i, gid in enumerate(ids):
            await store.publish(job, 1, gid, scored() if i else failed())

    gathering = asyncio.create_task(store.gather(job, 1, ids, timeout_s=600, quorum=3))
    await workers()
    gathered = await asyncio.wait_for(gathering, 60)  # long before the deadline
    assert [g.group_id for g in gathered.groups] == ids
    assert gathered.counts[batches.SCORED] == 2 and gathered.counts[batches.FAILED] == 1


async def test_quorum_reached_at_the_deadline(store: StepBatches, job: str) -> None:
    ids = [f"g{i}" for i in range(4)]
    for gid in ids[:2]:
        await store.publish(job, 1, gid, scored())
    gathered = await store.gather(job, 1, ids, timeout_s=0.2, quorum=2)
    assert gathered.expected == 4 and len(gathered.groups) == 2
    assert gathered.waited_s >= 0.2


async def test_a_wait_longer_than_the_clients_read_timeout(redis_url: str, job: str) -> None:
    # redis-py gives up on a reply after socket_timeout (5 s by default): the waits on the
    # notify list must stay shorter, whatever wake_s says.
    client = aioredis.from_url(redis_url, socket_timeout=0.3)
    try:
        store = StepBatches(client, wake_s=5.0)
        await store.publish(job, 1, "g0", scored())
        gathered = await store.gather(job, 1, ["g0", "g1"], timeout_s=1.0, quorum=1)
        assert len(gathered.groups) == 1 and gathered.waited_s >= 1.0
    finally:
        await client.aclose()


async def test_waits_end_before_redis_pys_default_read_timeout(client: aioredis.Redis) -> None:
    # A client made without socket_timeout still has one (redis-py 8: 5 s, = WAKE_S).
    assert StepBatches(client)._wake_s < 5.0


async def test_deadline_passed_below_quorum(store: StepBatches, job: str) -> None:
    await store.publish(job, 1, "g0", scored())
    with pytest.raises(QuorumNotReached, match="1/3 groups"):
        await store.gather(job, 1, ["g0", "g1", "g2"], timeout_s=0.2, quorum=2)


async def test_close_deletes_the_batch_and_refuses_stragglers(
    store: StepBatches, client: aioredis.Redis, job: str
) -> None:
    await store.publish(job, 1, "g0", scored())
    await store.publish(job, 1, "g0", failed())  # kept out
    keys = StepKeys(job, 1)
    for key in (keys.groups, keys.status, keys.notify):
        assert 0 < await client.ttl(key) <= batches.BATCH_TTL_S
    assert await _step_keys(client, keys) == {keys.groups, keys.status, keys.notify}
    await store.close(job, 1)
    assert await _step_keys(client, keys) == {keys.closed}
    assert not await store.needs_run(job, 1, "g1")
    assert await store.publish(job, 1, "g1", scored()) is Published.CLOSED
    assert await _step_keys(client, keys) == {keys.closed}


async def _step_keys(client: aioredis.Redis, keys: StepKeys) -> set[str]:
    return {k.decode() async for k in client.scan_iter(match=keys.pattern)}


async def test_a_batch_of_large_groups(store: StepBatches, job: str) -> None:
    ids = [f"g{i}" for i in range(8)]
    sent = {gid: scored(trajectories=8, turns=8, tokens=100) for gid in ids}
    await asyncio.gather(*(store.publish(job, 3, gid, r) for gid, r in sent.items()))
    gathered = await store.gather(job, 3, ids, timeout_s=60, quorum=8)
    assert [g.group_id for g in gathered.groups] == ids
    for entry in gathered.groups:
        assert entry.group == sent[entry.group_id].group
        assert entry.group.ByteSize() > 100_000  # realistically large: logprobs and ids


# ---------------------------------------------------------------- leases: groups survive
# their worker. Short leases here; each expiry is awaited as a condition, never a sleep.


@pytest.fixture
def short(client: aioredis.Redis) -> StepBatches:
    return StepBatches(client, wake_s=0.2, lease_s=0.3)


async def _until_gone(client: aioredis.Redis, key: str) -> None:
    deadline = asyncio.get_running_loop().time() + 60
    while await client.exists(key):
        assert asyncio.get_running_loop().time() < deadline, f"{key} never expired"
        await asyncio.sleep(0.05)


async def test_a_live_lease_is_not_lost_an_expired_one_is_reported_once(
    short: StepBatches, client: aioredis.Redis, job: str
) -> None:
    keys = StepKeys(job, 1)
    assert await short.claim(job, 1, "g0", "worker-a:1") is Claim.CLAIMED
    assert await client.get(keys.lease("g0")) == b"worker-a:1"
    assert 0 < await client.pttl(keys.lease("g0")) <= 300
    assert await short.renew(job, 1, "g0", "worker-a:1")
    assert await short.lost(job, 1) == []
    await _until_gone(client, keys.lease("g0"))  # the worker died: nobody renews
    assert not await short.renew(job, 1, "g0", "worker-a:1")  # never recreated
    assert await short.lost(job, 1) == ["g0"]
    assert await short.lost(job, 1) == []  # its claim went with the report: requeued once


async def test_publish_releases_the_runs_own_lease_and_claim(
    short: StepBatches, client: aioredis.Redis, job: str
) -> None:
    keys = StepKeys(job, 1)
    long = StepBatches(client, lease_s=600)
    assert await long.claim(job, 1, "g0", "a:1") is Claim.CLAIMED
    assert await long.publish(job, 1, "g0", failed(), token="a:1") is Published.STORED
    assert not await client.exists(keys.lease("g0"))
    assert not await client.hexists(keys.claims, "g0")
    assert await short.lost(job, 1) == []


async def test_a_run_gives_its_group_back_and_only_its_own(
    short: StepBatches, client: aioredis.Redis, job: str
) -> None:
    long = StepBatches(client, lease_s=600)  # so only the release can make it lost
    assert await long.claim(job, 1, "g0", "a:1") is Claim.CLAIMED
    assert not await long.release(job, 1, "g0", "b:2")  # another run's lease stays
    assert await short.lost(job, 1) == []
    assert await long.release(job, 1, "g0", "a:1")  # a worker stopping: given back
    assert await short.lost(job, 1) == ["g0"]  # the trainer sends it again, once
    assert await short.lost(job, 1) == []


async def test_a_claim_is_refused_when_final_closed_or_held_by_a_live_run(
    store: StepBatches, job: str
) -> None:
    assert await store.claim(job, 1, "g0", "a:1") is Claim.CLAIMED
    assert await store.claim(job, 1, "g0", "b:1") is Claim.HELD  # a duplicate delivery
    assert await store.publish(job, 1, "g0", scored(), token="a:1") is Published.STORED
    assert await store.claim(job, 1, "g0", "b:1") is Claim.FINAL
    await store.publish(job, 1, "g1", failed())
    assert await store.claim(job, 1, "g1", "b:1") is Claim.CLAIMED  # a failure runs again
    await store.close(job, 1)
    assert await store.claim(job, 1, "g2", "b:1") is Claim.CLOSED


async def test_a_requeued_group_counts_once_when_the_presumed_dead_run_publishes_late(
    short: StepBatches, client: aioredis.Redis, job: str
) -> None:
    keys = StepKeys(job, 1)
    assert await short.claim(job, 1, "g0", "a:1") is Claim.CLAIMED
    await _until_gone(client, keys.lease("g0"))  # a stalled, not dead, worker
    assert await short.lost(job, 1) == ["g0"]
    long = StepBatches(client, lease_s=600)
    assert await long.claim(job, 1, "g0", "b:1") is Claim.CLAIMED  # the re-run
    assert not await short.renew(job, 1, "g0", "a:1")  # a's lease is b's now
    assert await short.publish(job, 1, "g0", scored(), token="a:1") is Published.STORED
    assert await client.get(keys.lease("g0")) == b"b:1"  # b's lease is not a's to release
    assert await long.publish(job, 1, "g0", scored(3), token="b:1") is Published.KEPT
    progress = await short.progress(job, 1, ["g0"])
    assert progress.answered == 1 and progress.complete
    assert await client.llen(keys.notify) == 1  # stored once
    assert await short.lost(job, 1) == []


async def test_restart_keeps_live_claims_and_forgets_dead_ones(
    short: StepBatches, client: aioredis.Redis, job: str
) -> None:
    keys = StepKeys(job, 2)
    long = StepBatches(client, lease_s=600)
    assert await long.claim(job, 2, "live", "a:1") is Claim.CLAIMED
    assert await short.claim(job, 2, "dead", "b:1") is Claim.CLAIMED
    await _until_gone(client, keys.lease("dead"))
    assert await short.restart(job, 2) == set()
    # The dead claim went (restart dispatches that group again), the live one is watched.
    assert set(await client.hkeys(keys.claims)) == {b"live"}
    assert await short.lost(job, 2) == []
    await client.delete(keys.lease("live"))  # its worker dies after the restart
    assert await short.lost(job, 2) == ["live"]


async def test_gather_requeues_a_lost_group_and_completes(
    short: StepBatches, client: aioredis.Redis, job: str
) -> None:
    await short.claim(job, 1, "g0", "a:1")  # a worker that dies holding g0
    await short.publish(job, 1, "g1", scored())
    requeued: list[list[str]] = []

    async def requeue(lost: list[str]) -> None:  # the trainer's re-dispatch: a live run
        requeued.append(lost)
        assert await short.claim(job, 1, "g0", "b:1") is Claim.CLAIMED
        await short.publish(job, 1, "g0", scored(), token="b:1")

    gathered = await asyncio.wait_for(
        short.gather(job, 1, ["g0", "g1"], timeout_s=600, quorum=2, on_lost=requeue), 60
    )
    assert requeued == [["g0"]] and gathered.requeued == 1
    assert [g.group_id for g in gathered.groups] == ["g0", "g1"]


async def test_close_deletes_claims_and_leases(store: StepBatches, job: str) -> None:
    keys = StepKeys(job, 1)
    await store.claim(job, 1, "g0", "a:1")
    await store.publish(job, 1, "g1", scored())
    assert await _step_keys(store._redis, keys) == {
        keys.groups,
        keys.status,
        keys.notify,
        keys.claims,
        keys.lease("g0"),
    }
    await store.close(job, 1)
    assert await _step_keys(store._redis, keys) == {keys.closed}


async def test_discard_forgets_the_step_whole_and_it_runs_again(
    store: StepBatches, job: str
) -> None:
    keys = StepKeys(job, 1)
    await store.claim(job, 1, "g0", "a:1")  # a run still going from before
    await store.publish(job, 1, "g1", scored())
    verdict = rollout_pb2.RunGroupResponse(outcome=pb.RewardOutcome(fail_job="judge down"))
    await store.publish(job, 1, "g2", verdict)
    assert await store.restart(job, 1) == {"g1", "g2"}  # final: a restart keeps them
    await store.discard(job, 1)
    assert await _step_keys(store._redis, keys) == set()  # not closed: the step runs again
    assert await store.restart(job, 1) == set()
    for group in ("g0", "g1", "g2"):
        assert await store.needs_run(job, 1, group)
    assert await store.claim(job, 1, "g0", "b:1") is Claim.CLAIMED  # the old lease went
    assert await store.publish(job, 1, "g1", scored()) is Published.STORED
