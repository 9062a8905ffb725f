"""Policy throughput over 1, 2 and 4 inference replicas, through the rollout workers' own
routing (`artfleet_rollout.policy_routing`: least loaded, each episode kept on its
replica). Each replica is the replay policy (bench/replay_policy.py) answering after a
fixed time per sampled token, at most `--concurrency` answers at once, so the replicas,
not this machine's cores, bound the throughput. Many multi-turn episodes run at once
(each turn sends the history so far: the assistant's tool call and its result).

    PYTHONPATH=src:services/rollout:... python bench/replica_bench.py

Prints `turns_per_s_N=` for each replica count (1 replica is the baseline, measured in
the same run), `replica_scaling_2=` and `replica_scaling_4=` (turns/s over 1 replica;
targets >= 1.8 and >= 3.4) and `sticky_hit_frac=` (over the 2- and 4-replica runs: the
share of each episode's turns on the replica that served most of them; target >= 0.95).
Then the trainer's own publish path (`artfleet_trainer.serving.replicas`) publishes
checkpoints to 1 and to 4 replicas that each take `--publish-latency-ms` to load one:
`publish_all_replicas_s=` (4 replicas, each verified), with `publish_one_replica_s=` its
same-run baseline and `publish_all_replicas_ratio_4=` their ratio (1.0: the replicas load
at once, not one after another).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_policy import ReplayPolicy, parse_script

from artfleet.v1 import rollout_pb2
from artfleet_rollout.adapters import OpenAIClients
from artfleet_rollout.ports import Policy
from artfleet_rollout.settings import RolloutSettings

TOKEN = "replica-bench-token"
MODEL = "replay@1"


def script(turns: int) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = [
        {"tool": "bash", "arguments": {"command": f"echo step {i} && ls -la"}}
        for i in range(turns - 1)
    ]
    return [*calls, {"content": "done: every step ran"}]


async def episode(policy: Policy, turns: int) -> int:
    """One multi-turn episode as the tool agent sends it: each turn's answer (a tool call)
    and its result go back with the next request."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent in a shell."},
        {"role": "user", "content": "Run the steps."},
    ]
    for _ in range(turns):
        turn = await policy.complete(messages)
        message = turn.choice.message
        calls = message.tool_calls or []
        messages.append(message.model_dump(exclude_none=True))
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok"})
    return turns


async def run(urls: list[str], args: argparse.Namespace, run_id: str) -> float:
    """Turns per second of `args.episodes` episodes at once over the replicas at `urls`."""
    settings = RolloutSettings(api_token=SecretStr(TOKEN), model_retries=0)
    clients = OpenAIClients(settings)
    task = rollout_pb2.GroupTask(
        model_base_url=",".join(urls), policy=MODEL, temperature=1.0, max_tokens=128
    )
    policy = clients.policy(task, TOKEN)
    try:
        start = time.perf_counter()
        done = await asyncio.gather(
            *(
                episode(policy.for_episode(f"{run_id}/{i}"), args.turns)
                for i in range(args.episodes)
            )
        )
        elapsed = time.perf_counter() - start
    finally:
        await clients.close()
    return sum(done) / elapsed


def sticky_fraction(servers: list[ReplayPolicy]) -> tuple[int, int]:
    """(turns on each episode's most-used replica, all turns) of what `servers` served."""
    per_episode: dict[str, Counter[int]] = {}
    for index, server in enumerate(servers):
        for record in server.served:
            per_episode.setdefault(record.episode, Counter())[index] += 1
    on_main = sum(max(c.values()) for c in per_episode.values())
    return on_main, sum(sum(c.values()) for c in per_episode.values())


async def publish_seconds(count: int, args: argparse.Namespace) -> float:
    """Mean seconds of the trainer's publish (artfleet_trainer.serving.replicas: to every
    replica at once, each verified by a one-token completion on the new name) over
    `count` replicas that each take `--publish-latency-ms` to load a checkpoint."""
    from artfleet.contracts.policy_publish import PublishPolicy
    from artfleet_trainer.serving.replicas import InferenceReplicas

    servers = [
        ReplayPolicy([], TOKEN, publish_latency_s=args.publish_latency_ms / 1000)
        for _ in range(count)
    ]
    for server in servers:
        server.start()
    try:
        roots = ",".join(s.base_url.removesuffix("/v1") for s in servers)
        replicas = InferenceReplicas(roots, TOKEN)
        started = time.perf_counter()
        for step in range(1, args.publishes + 1):
            message = PublishPolicy(name="bench", step=step, checkpoint=f"/art/{step}")
            assert await replicas.publish(message) == count
        return (time.perf_counter() - started) / args.publishes
    finally:
        for server in servers:
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=48, help="episodes at once")
    parser.add_argument("--turns", type=int, default=5, help="turns per episode")
    parser.add_argument("--token-latency-ms", type=float, default=4.0)
    parser.add_argument("--concurrency", type=int, default=2, help="answers at once per replica")
    parser.add_argument(
        "--publish-latency-ms", type=float, default=1000.0, help="a replica's load time"
    )
    parser.add_argument("--publishes", type=int, default=5, help="checkpoints published")
    args = parser.parse_args()
    replies = parse_script(script(args.turns))
    rates: dict[int, float] = {}
    sticky = [0, 0]
    for count in (1, 2, 4):
        servers = [
            ReplayPolicy(
                replies,
                TOKEN,
                token_latency_s=args.token_latency_ms / 1000,
                concurrency=args.concurrency,
            )
            for _ in range(count)
        ]
        for server in servers:
            server.start()
        try:
            rates[count] = asyncio.run(run([s.base_url for s in servers], args, f"r{count}"))
        finally:
            for server in servers:
                server.stop()
        if count > 1:
            on_main, turns = sticky_fraction(servers)
            sticky[0] += on_main
            sticky[1] += turns
        print(f"turns_per_s_{count}={rates[count]:.2f}", flush=True)
    print(f"replica_scaling_2={rates[2] / rates[1]:.2f}")
    print(f"replica_scaling_4={rates[4] / rates[1]:.2f}")
    print(f"sticky_hit_frac={sticky[0] / sticky[1]:.3f}")
    publish = {count: asyncio.run(publish_seconds(count, args)) for count in (1, 4)}
    print(f"publish_one_replica_s={publish[1]:.3f}")
    print(f"publish_all_replicas_s={publish[4]:.3f}")
    print(f"publish_all_replicas_ratio_4={publish[4] / publish[1]:.2f}")
    ok = rates[2] / rates[1] >= 1.8 and rates[4] / rates[1] >= 3.4 and sticky[0] >= 0.95 * sticky[1]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
