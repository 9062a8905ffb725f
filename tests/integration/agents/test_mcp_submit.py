"""Submitting MCP jobs: the environment's evaluate tool is the default reward, and a server
that cannot give one is refused at submit with its reason. A real trainer servicer on a
real Redis asks a real Rollout gRPC server (which starts the real MCP servers) and a real
reward service."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr
from repo_paths import FIXTURES

from artfleet.contracts.errors import InvalidArgument
from artfleet.runtime.rpc.server import GrpcServer
from artfleet.specs.job import spec_to_proto, validate_spec
from artfleet.v1 import reward_pb2_grpc, rollout_pb2_grpc, trainer_pb2
from artfleet_reward.servicer import RewardServicer
from artfleet_rollout.environments.loaders import load_hud
from artfleet_rollout.environments.registry import register_environment
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.servicer import RolloutServicer
from artfleet_rollout.settings import RolloutSettings
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.servicer import TrainerServicer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOKEN = "mcp-submit-token"
COUNTER = FIXTURES / "mcp_counter_server.py"


@dataclass
class Submit:
    servicer: TrainerServicer

    async def __call__(self, **spec: Any) -> Any:
        request = trainer_pb2.SubmitJobRequest(spec=spec_to_proto(validate_spec(spec)))
        return await self.servicer.SubmitJob(request, None)  # type: ignore[arg-type, unused-ignore]


@pytest.fixture
async def submit(redis_url: str) -> AsyncIterator[Submit]:
    reward = grpc.aio.server()
    reward_pb2_grpc.add_RewardServicer_to_server(RewardServicer(), reward)
    reward_port = reward.add_insecure_port("127.0.0.1:0")
    await reward.start()
    settings = RolloutSettings(
        api_token=SecretStr(TOKEN),
        sandbox_target="127.0.0.1:1",  # the local servers here need no sandbox
        reward_target=f"127.0.0.1:{reward_port}",
        mcp_timeout_s=20.0,
        port=0,
        metrics_port=0,
    )
    runner = GroupRunner(settings)
    await runner.start()
    servicer = RolloutServicer(runner)
    server = GrpcServer(
        settings,
        "rollout",
        [lambda s: rollout_pb2_grpc.add_RolloutServicer_to_server(servicer, s)],
        ["artfleet.v1.Rollout"],
    )
    await server.start()
    client = aioredis.from_url(redis_url)
    await client.flushdb()
    trainer = TrainerServicer(
        JobStore(client),
        RolloutClient(f"127.0.0.1:{server.port}", TOKEN),
        RewardClient(f"127.0.0.1:{reward_port}", TOKEN),
        lambda backend: "",
    )
    try:
        yield Submit(trainer)
    finally:
        await client.aclose()
        await server.stop()
        await runner.stop()
        await reward.stop(1)


def _taskset(tmp_path: Path, name: str, server: dict[str, Any], evaluate: str) -> str:
    tasks = [
        {"id": f"t{i}", "split": "train", "prompt": "Count to three.", "mcp_config": server}
        | {"evaluate_tool": {"name": evaluate}}
        for i in range(2)
    ]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(tasks))
    register_environment(name, lambda: load_hud(str(path), name=name))
    return name


async def test_an_mcp_job_without_reward_is_scored_by_the_evaluate_tool(submit: Submit) -> None:
    job = await submit(environment="game-2048")
    assert [s.name for s in job.spec.reward.scorers] == ["mcp_evaluate"]
    # Other kinds keep theirs; a reward the submitter wrote is kept as written.
    shell = await submit(environment="shell-tasks")
    assert [s.name for s in shell.spec.reward.scorers] == ["process", "task_check"]
    mixed = await submit(environment="game-2048", reward=[{"name": "process"}])
    assert [s.name for s in mixed.spec.reward.scorers] == ["process"]


async def test_a_server_without_the_evaluate_tool_is_refused_at_submit(
    submit: Submit, tmp_path: Path
) -> None:
    local = {"counter": {"command": sys.executable, "args": [str(COUNTER)]}}
    name = _taskset(tmp_path, "no-grade", local, evaluate="grade")
    with pytest.raises(InvalidArgument) as info:
        await submit(environment=name)
    assert info.value.field == "reward"
    assert "no evaluate tool 'grade'" in str(info.value) and "move, setup" in str(info.value)


async def test_a_server_that_does_not_start_is_refused_at_submit_with_why(
    submit: Submit, tmp_path: Path
) -> None:
    ssh = {"remote": {"command": "ssh", "args": ["-o", "BatchMode=yes", "nohost.invalid", "x"]}}
    name = _taskset(tmp_path, "unreachable", ssh, evaluate="evaluate")
    with pytest.raises(InvalidArgument) as info:
        await submit(environment=name)
    assert "MCP server 'remote' did not start" in str(info.value)
    assert "nohost.invalid" in str(info.value)


async def test_a_hud_config_yaml_submits_with_its_server(submit: Submit) -> None:
    # The HUD integration's config.yaml, the bundled 2048 server as its `local` command.
    server = {"local": {"command": "artfleet-mcp-2048", "args": []}}
    job = await submit(environments={2048: {"mcp_config": server, "max_turns": 7}})
    assert job.spec.environment == "game-2048" and job.spec.max_turns == 7
    assert json.loads(job.spec.mcp_config) == server
    assert [s.name for s in job.spec.reward.scorers] == ["mcp_evaluate"]


async def test_the_submit_probe_starts_the_jobs_server_not_the_scenarios(
    submit: Submit,
) -> None:
    # The bundled taskset's own server starts; the job's does not, and that is what the
    # episodes would start.
    ssh = {"remote": {"command": "ssh", "args": ["-o", "BatchMode=yes", "nohost.invalid", "x"]}}
    with pytest.raises(InvalidArgument) as info:
        await submit(environments={"2048": {"mcp_config": ssh}})
    assert info.value.field == "reward"
    assert "MCP server 'remote' did not start" in str(info.value)
