"""Measures the base policy on the agent-kind environments (not run by pytest; minutes).

    PYTHONPATH=... python scripts/measure_agent_base_rates.py [--per-difficulty 8] [--samples 4]

Starts the built-in torch server with the embedded SmolLM2-135M, then:
- math-single: `samples` answers to `per-difficulty` train problems of each difficulty,
  checked with the answer_check scorer's numeric rule (the last number in the reply);
- tool-shell: 2 episodes on each of `scenarios` train tasks in a local-backend sandbox;
- game-2048: 2 episodes on each of `scenarios` train tasks through the real MCP server
  (`artfleet-mcp-2048` must be on PATH).
Prints `name=value` lines: success rates and seconds per episode.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from typing import Any

import grpc
from openai import AsyncOpenAI
from pydantic import SecretStr

from artfleet.clients.sandbox import SandboxRouter
from artfleet.specs.scorer_params import AnswerCheckParams
from artfleet.v1 import rollout_pb2, sandbox_pb2_grpc
from artfleet_reward.scorers.answer import check
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


async def math(client: AsyncOpenAI, model: str, per: int, samples: int) -> None:
    env = get_environment("math-single")
    params = AnswerCheckParams()
    by: dict[str, list[Any]] = {}
    for s in env.scenarios("train"):
        if len(by.setdefault(s.difficulty, [])) < per:
            by[s.difficulty].append(s)
    for difficulty, scenarios in sorted(by.items()):
        start = time.perf_counter()

        async def ask(s: Any) -> int:
            reply = await client.chat.completions.create(
                model=model,
                messages=[
                    {"role": "system", "content": s.system},
                    {"role": "user", "content": s.instruction},
                ],
                n=samples,
                max_tokens=48,
                temperature=0.7,
            )
            return sum(check(c.message.content or "", s.answer, params) for c in reply.choices)

        solved = sum(await asyncio.gather(*(ask(s) for s in scenarios)))
        total = len(scenarios) * samples
        print(f"math_single_{difficulty}_solved={solved}/{total}")
        print(f"math_single_{difficulty}_rate={solved / total:.3f}")
        per_answer = (time.perf_counter() - start) / total
        print(f"math_single_{difficulty}_seconds_per_answer={per_answer:.2f}")


async def episodes(url: str, model: str, sandbox: str, environment: str, scenarios: int) -> None:
    settings = RolloutSettings(api_token=KEY, sandbox_target=sandbox)  # type: ignore[arg-type]
    router = SandboxRouter(sandbox, KEY)
    clients = OpenAIClients(settings)

    class Reward:
        async def score(self, group: Any, eps: Any, spec: Any) -> Any:
            from artfleet.v1 import reward_pb2

            response = reward_pb2.ScoreGroupResponse()
            for _ in eps:
                response.scores.add(reward=0.0)
            return response

    async def close() -> None:
        await clients.close()
        await router.close()

    async def connect(_: object) -> Connections:
        return Connections(clients, GrpcWorkspaces(router), Reward(), close)

    runner = GroupRunner(settings, connect=connect)
    await runner.start()
    ids = [s.id for s in get_environment(environment).scenarios("train")][:scenarios]
    start = time.perf_counter()
    tasks = [
        rollout_pb2.GroupTask(
            job_id="measure",
            group_id=f"{environment}-{i}",
            environment=environment,
            scenario_id=sid,
            rollouts=2,
            max_turns=4,
            model_base_url=url,
            policy=model,
            temperature=0.7,
            max_tokens=64,
            max_context_tokens=2048,
        )
        for i, sid in enumerate(ids)
    ]
    responses = await asyncio.gather(*(runner.run(t) for t in tasks))
    seconds = time.perf_counter() - start
    await runner.stop()
    eps = [e for r in responses for e in r.episodes]
    failed = sum(len(r.group.exceptions) for r in responses)
    name = environment.replace("-", "_")
    if environment == "game-2048":
        rewards = [e.evaluate_reward for e in eps]
        print(f"{name}_evaluate_reward_mean={sum(rewards) / max(1, len(rewards)):.3f}")
        print(f"{name}_reached_target={sum(r >= 1.0 for r in rewards)}/{len(rewards)}")
    else:
        print(f"{name}_check_passed={sum(e.check_passed for e in eps)}/{len(eps)}")
    calls = sum(sum(e.tool_calls.values()) for e in eps)
    valid = sum(s.valid_format for e in eps for s in e.steps)
    steps = sum(len(e.steps) for e in eps)
    print(f"{name}_episode_failures={failed}")
    print(f"{name}_tool_calls_per_episode={calls / max(1, len(eps)):.2f}")
    print(f"{name}_valid_step_rate={valid / max(1, steps):.3f}")
    print(f"{name}_wall_seconds_per_group_of_2={seconds / max(1, len(tasks)) * 1:.1f}")
    print(f"{name}_wall_seconds_all_{len(tasks)}_groups={seconds:.1f}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-difficulty", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--scenarios", type=int, default=4)
    args = parser.parse_args()
    backend = TorchBackend(path=tempfile.mkdtemp(), api_key=KEY)
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name="measure", project="m", base_model="smollm2-135m-instruct"
    )
    await model.register(backend)
    url, name = str(model.inference_base_url), model.get_inference_name()
    client = AsyncOpenAI(base_url=url, api_key=KEY, max_retries=0)
    settings = SandboxSettings(
        api_token=SecretStr(KEY),
        sandbox_backend="local",
        sandbox_path=f"{os.path.dirname(sys.executable)}:{DEFAULT_SANDBOX_PATH}",
        bwrap_expose_paths=[sys.base_prefix, sys.prefix],
    )
    servicer, sandbox_backend = build_servicer(settings)
    await sandbox_backend.start()
    server = grpc.aio.server()
    sandbox_pb2_grpc.add_SandboxServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        await math(client, name, args.per_difficulty, args.samples)
        for environment in ("tool-shell", "game-2048"):
            await episodes(url, name, f"127.0.0.1:{port}", environment, args.scenarios)
    finally:
        await client.close()
        await server.stop(grace=1)
        await sandbox_backend.stop()
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main())
