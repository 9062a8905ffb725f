"""Measures the base policy on `code-fix` with the terminal agent (not run by pytest; minutes).

    PYTHONPATH=... python scripts/measure_code_fix_base.py [--backend local|docker]
        [--split train,test] [--difficulty easy] [--rollouts 2] [--max-turns 4]
        [--max-tokens 96] [--parallel 4] [--dump DIR]

Starts the built-in torch server with the embedded SmolLM2-135M and a sandbox service of
the chosen backend, runs `rollouts` episodes of every task of each split (groups
`parallel` at a time), and prints `name=value` lines: tasks solved (the hidden tests'
`resolved`), the mean group time (its episodes run at once, so about an episode's time
with `parallel` x `rollouts` episodes in flight) and the mean time to place and run the
hidden tests per session. `--dump` writes each episode's messages as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from pydantic import SecretStr

from artfleet.clients.sandbox import SandboxRouter
from artfleet.contracts.trajlog import messages_of
from artfleet.v1 import reward_pb2, rollout_pb2, sandbox_pb2_grpc
from artfleet_rollout.adapters import GrpcWorkspaces, OpenAIClients
from artfleet_rollout.environments import get_environment
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.ports import Connections
from artfleet_rollout.settings import RolloutSettings
from artfleet_sandbox.factory import build_servicer
from artfleet_sandbox.settings import DEFAULT_SANDBOX_PATH, SandboxSettings
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend.backend import TorchBackend

KEY = "measure-key"
ENV = "code-fix"


class _NoReward:
    """Success is read from the episodes' hidden tests; no score is needed here."""

    async def score(self, group: Any, eps: Any, spec: Any) -> Any:
        response = reward_pb2.ScoreGroupResponse()
        for _ in eps:
            response.scores.add(reward=0.0)
        return response


async def sandbox_server(backend: str) -> tuple[grpc.aio.Server, Any, str]:
    settings = SandboxSettings(
        api_token=SecretStr(KEY),
        sandbox_backend=backend,  # type: ignore[arg-type]
        sandbox_path=f"{os.path.dirname(sys.executable)}:{DEFAULT_SANDBOX_PATH}",
        bwrap_expose_paths=[sys.base_prefix, sys.prefix],
        sandbox_allow_unisolated=True,
    )
    servicer, sandbox_backend = build_servicer(settings)
    await sandbox_backend.start()
    server = grpc.aio.server()
    sandbox_pb2_grpc.add_SandboxServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, sandbox_backend, f"127.0.0.1:{port}"


async def run_split(
    runner: GroupRunner, args: argparse.Namespace, url: str, model: str, split: str
) -> None:
    scenarios = [
        s
        for s in get_environment(ENV).scenarios(split)
        if not args.difficulty or s.difficulty in args.difficulty.split(",")
    ]
    gate = asyncio.Semaphore(args.parallel)
    group_seconds: list[float] = []

    async def one(index: int, scenario_id: str) -> rollout_pb2.RunGroupResponse:
        task = rollout_pb2.GroupTask(
            job_id="measure",
            group_id=f"{split}-{index}",
            environment=ENV,
            scenario_id=scenario_id,
            rollouts=args.rollouts,
            max_turns=args.max_turns,
            model_base_url=url,
            policy=model,
            temperature=0.7,
            max_tokens=args.max_tokens,
            max_context_tokens=4096,
        )
        async with gate:
            start = time.perf_counter()
            response = await runner.run(task)
            group_seconds.append(time.perf_counter() - start)
        return response

    responses = await asyncio.gather(*(one(i, s.id) for i, s in enumerate(scenarios)))
    episodes = [(s, e) for s, r in zip(scenarios, responses, strict=True) for e in r.episodes]
    solved = sorted({s.id for s, e in episodes if e.check_passed})
    tests_s = [e.tests_seconds for _, e in episodes if e.tests_seconds > 0]
    resolved = sum(e.check_passed for _, e in episodes)
    print(f"code_fix_{split}_episodes_resolved={resolved}/{len(episodes)}")
    print(f"code_fix_{split}_tasks_solved={len(solved)}/{len(scenarios)} {','.join(solved)}")
    print(f"code_fix_{split}_group_seconds_mean={statistics.mean(group_seconds):.1f}")
    print(f"code_fix_{split}_tests_seconds_per_session={statistics.mean(tests_s or [0]):.2f}")
    if args.dump:
        dump(Path(args.dump), split, scenarios, responses)


def dump(out: Path, split: str, scenarios: list[Any], responses: list[Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for scenario, response in zip(scenarios, responses, strict=True):
        for i, trajectory in enumerate(response.group.trajectories):
            episode = response.episodes[i] if i < len(response.episodes) else None
            data = {
                "scenario": scenario.id,
                "difficulty": scenario.difficulty,
                "resolved": bool(episode and episode.check_passed),
                "messages": messages_of(trajectory)[-8:],
            }
            (out / f"{split}-{scenario.id}-{i}.json").write_text(json.dumps(data, indent=1))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=("local", "docker"), default="local")
    parser.add_argument("--split", default="train,test")
    parser.add_argument("--difficulty", default="", help="comma list; '' = all")
    parser.add_argument("--rollouts", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--dump", default="")
    args = parser.parse_args()
    backend = TorchBackend(path=tempfile.mkdtemp(), api_key=KEY)
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name="measure", project="m", base_model="smollm2-135m-instruct"
    )
    await model.register(backend)
    url, name = str(model.inference_base_url), model.get_inference_name()
    server, sandbox_backend, target = await sandbox_server(args.backend)
    settings = RolloutSettings(api_token=KEY, sandbox_target=target)  # type: ignore[arg-type]
    router = SandboxRouter(target, KEY)
    clients = OpenAIClients(settings)

    async def close() -> None:
        await clients.close()
        await router.close()

    async def connect(_: object) -> Connections:
        return Connections(clients, GrpcWorkspaces(router), _NoReward(), close)

    runner = GroupRunner(settings, connect=connect)
    await runner.start()
    print(f"backend={args.backend} rollouts={args.rollouts} max_turns={args.max_turns}")
    try:
        for split in args.split.split(","):
            await run_split(runner, args, url, name, split)
    finally:
        await runner.stop()
        await server.stop(grace=1)
        await sandbox_backend.stop()
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main())
