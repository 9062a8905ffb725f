"""`artfleet rollout run` against a real Rollout gRPC server (auth, health, the shared
bootstrap) whose GroupRunner talks to a real sandbox service (local backend), a real reward
service and the torch backend's real OpenAI-compatible server.

The fast tests need no model: the policy server serves none, so they cover the CLI's
errors and exit codes end to end. The slow test loads SmolLM2-135M and runs a scored group.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from pydantic import SecretStr
from typer.testing import CliRunner, Result

from artfleet.runtime.rpc.server import GrpcServer
from artfleet.v1 import reward_pb2_grpc, rollout_pb2_grpc, sandbox_pb2_grpc
from artfleet_cli.main import app
from artfleet_reward.servicer import RewardServicer
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.servicer import RolloutServicer
from artfleet_rollout.settings import RolloutSettings
from artfleet_sandbox.factory import build_servicer
from artfleet_sandbox.settings import DEFAULT_SANDBOX_PATH, SandboxSettings
from artfleet_trainer.torch_serving.server import InferenceServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOKEN = "rollout-cli-integration-token"


@dataclass
class Fleet:
    rollout_target: str
    policy_url: str


async def _plain_server(register: Any) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


@pytest_asyncio.fixture
async def sandbox_target() -> AsyncIterator[str]:
    settings = SandboxSettings(
        api_token=SecretStr(TOKEN),
        sandbox_backend="local",
        sandbox_allow_unisolated=True,  # machines without bubblewrap still run these
        sandbox_path=f"{os.path.dirname(sys.executable)}:{DEFAULT_SANDBOX_PATH}",
        bwrap_expose_paths=[sys.base_prefix, sys.prefix],
    )
    servicer, backend = build_servicer(settings)
    await backend.start()
    server, port = await _plain_server(
        lambda s: sandbox_pb2_grpc.add_SandboxServicer_to_server(servicer, s)
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(1)
        await backend.stop()


@pytest_asyncio.fixture
async def reward_target() -> AsyncIterator[str]:
    servicer = RewardServicer()
    server, port = await _plain_server(
        lambda s: reward_pb2_grpc.add_RewardServicer_to_server(servicer, s)
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(1)


async def start_rollout(
    sandbox_target: str, reward_target: str
) -> tuple[GrpcServer, GroupRunner, str]:
    settings = RolloutSettings(
        api_token=SecretStr(TOKEN),
        sandbox_target=sandbox_target,
        reward_target=reward_target,
        model_retries=0,
        port=0,
        metrics_port=0,
    )
    runner = GroupRunner(settings, environ={"POLICY_KEY": TOKEN, "WRONG_KEY": "not-the-key"})
    await runner.start()  # on this loop, which the server shares
    servicer = RolloutServicer(runner)
    server = GrpcServer(
        settings,
        "rollout",
        [lambda s: rollout_pb2_grpc.add_RolloutServicer_to_server(servicer, s)],
        ["artfleet.v1.Rollout"],
    )
    await server.start()
    await server.set_serving(True)
    return server, runner, f"127.0.0.1:{server.port}"


@pytest_asyncio.fixture
async def fleet(sandbox_target: str, reward_target: str) -> AsyncIterator[Fleet]:
    policy = InferenceServer({}, api_key=TOKEN)  # serves no model: every call is a 404
    policy_port = await policy.start()
    server, runner, target = await start_rollout(sandbox_target, reward_target)
    try:
        yield Fleet(target, f"http://127.0.0.1:{policy_port}/v1")
    finally:
        await server.stop(1)
        await runner.stop()
        await policy.stop()


async def cli(args: list[str], env: Mapping[str, str] | None = None) -> Result:
    """The CLI in a thread: the servers it calls run on this test's event loop."""
    runner = CliRunner()
    environ = {"ARTFLEET_API_TOKEN": TOKEN, **(env or {})}
    return await asyncio.to_thread(
        lambda: runner.invoke(app, ["rollout", "run", *args], env=environ)
    )


def _args(fleet: Fleet, *extra: str) -> list[str]:
    return [
        "--target",
        fleet.rollout_target,
        "--base-url",
        fleet.policy_url,
        "--model",
        "ghost@0",
        "--rollouts",
        "2",
        *extra,
    ]


async def test_failed_episodes_are_shown_and_exit_1(fleet: Fleet) -> None:
    result = await cli(_args(fleet, "--scenario", "create-hello-file"))
    assert result.exit_code == 1, result.output
    assert "create-hello-file" in result.stdout
    assert result.stdout.count("episode failed: ") == 2
    assert "ghost@0" in result.stdout  # the endpoint's own 404 message


async def test_split_and_index_pick_the_scenario_via_describe(fleet: Fleet) -> None:
    result = await cli(_args(fleet, "--split", "test", "--index", "0", "--json"))
    assert result.exit_code == 1, result.output
    response = json.loads(result.stdout)
    assert len(response["group"]["exceptions"]) == 2
    assert response["group"]["metadata"]["group_id"]["string_value"].startswith("cli-")


@pytest.mark.parametrize(
    ("extra", "env", "message"),
    [
        (["--index", "999"], {}, "--index 999 is out of range"),
        (["--reward", "{name: process}"], {}, "--reward is a list of scorers"),
        (["--reward", "[{name: process, weight: x}]"], {}, "reward[0].weight"),
        (["--max-turns", "0"], {}, "max_turns"),
        (["--api-key-env", "NOT_SET_ANYWHERE"], {}, "task.model_api_key_env"),
        (["--scenario", "nope"], {}, "task.scenario_id"),
        ([], {"ARTFLEET_API_TOKEN": "wrong"}, "UNAUTHENTICATED"),
        ([], {"ARTFLEET_API_TOKEN": ""}, "no API token"),
    ],
)
async def test_bad_input_is_an_error_with_exit_2(
    fleet: Fleet, extra: list[str], env: dict[str, str], message: str
) -> None:
    result = await cli(_args(fleet, *extra), env)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and message in result.stderr


async def test_unreachable_rollout_service_is_exit_1(fleet: Fleet) -> None:
    args = _args(fleet, "--scenario", "create-hello-file")
    args[1] = "127.0.0.1:1"
    result = await cli(args)
    assert result.exit_code == 1
    assert "cannot reach the rollout service at 127.0.0.1:1" in result.stderr


# ---------------------------------------------------------------- with the real model
@pytest_asyncio.fixture
async def model_fleet(
    sandbox_target: str, reward_target: str, tmp_path: Path
) -> AsyncIterator[tuple[Fleet, str]]:
    from artfleet.contracts.art_types import art
    from artfleet_trainer.torch_backend.backend import TorchBackend

    backend = TorchBackend(path=str(tmp_path / "art"), api_key=TOKEN)
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name="agent", project="it", base_model="smollm2-135m-instruct"
    )
    await model.register(backend)
    assert model.inference_base_url is not None
    server, runner, target = await start_rollout(sandbox_target, reward_target)
    try:
        yield Fleet(target, model.inference_base_url), model.get_inference_name()
    finally:
        await server.stop(1)
        await runner.stop()
        await backend.close()


@pytest.mark.slow
async def test_a_real_group_is_run_scored_and_printed(model_fleet: tuple[Fleet, str]) -> None:
    fleet, name = model_fleet
    common = [
        "--target",
        fleet.rollout_target,
        "--base-url",
        fleet.policy_url,
        "--model",
        name,
        "--api-key-env",
        "POLICY_KEY",
        "--scenario",
        "create-hello-file",
        "--rollouts",
        "2",
        "--max-turns",
        "2",
        "--max-tokens",
        "48",
    ]
    result = await cli([*common, "--json"])
    assert result.exit_code == 0, result.output
    response = json.loads(result.stdout)
    trajectories = response["group"]["trajectories"]
    assert len(trajectories) == len(response["episodes"]) == 2
    for trajectory in trajectories:
        assert {"reward_process", "reward_task_check"} <= set(trajectory["metrics"])
        choices = [i["choice"] for i in trajectory["messages_and_choices"] if "choice" in i]
        assert choices and all(c["has_logprobs"] for c in choices)
    table = await cli(common)
    assert table.exit_code == 0, table.output
    assert "process=" in table.stdout and "task_check=" in table.stdout
