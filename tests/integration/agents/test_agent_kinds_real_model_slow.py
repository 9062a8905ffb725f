"""Every agent kind with the real SmolLM2-135M through the built-in torch policy server:
`single` (math-single, no sandbox), `tools` (tool-shell in a real local-backend sandbox over
gRPC), `mcp` (game-2048 through the real MCP server over stdio) and `art` (an installed
package's ART rollout function). ART then tokenizes every
assistant turn, tool calls included, as trainable, with the server's token ids.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from agent_fakes import HalfReward
from art_quiz import PLUGIN
from plugin_dist import install_plugin
from pydantic import SecretStr
from trainable import assert_trainable

from artfleet.clients.sandbox import SandboxRouter
from artfleet.v1 import rollout_pb2, sandbox_pb2_grpc
from artfleet_rollout.adapters import GrpcWorkspaces, OpenAIClients
from artfleet_rollout.environments import registry as environments
from artfleet_rollout.group import GroupRunner
from artfleet_rollout.ports import Connections
from artfleet_rollout.settings import RolloutSettings
from artfleet_sandbox.factory import build_servicer
from artfleet_sandbox.settings import DEFAULT_SANDBOX_PATH, SandboxSettings
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend.backend import TorchBackend

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

KEY = "agents-test-key"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def policy_url(module_tmp: Callable[[str], Path]) -> AsyncIterator[tuple[str, str]]:
    backend = TorchBackend(path=str(module_tmp("art")), api_key=KEY)
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name="agents", project="it", base_model="smollm2-135m-instruct"
    )
    await model.register(backend)
    assert model.inference_base_url is not None
    try:
        yield model.inference_base_url, model.get_inference_name()
    finally:
        await backend.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sandbox_target() -> AsyncIterator[str]:
    settings = SandboxSettings(
        api_token=SecretStr(KEY),
        sandbox_backend="local",
        sandbox_path=f"{os.path.dirname(sys.executable)}:{DEFAULT_SANDBOX_PATH}",
        bwrap_expose_paths=[sys.base_prefix, sys.prefix],
    )
    servicer, backend = build_servicer(settings)
    await backend.start()
    server = grpc.aio.server()
    sandbox_pb2_grpc.add_SandboxServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=1)
        await backend.stop()


async def _run_group(
    policy: tuple[str, str], sandbox: str, environment: str, scenario: str, **fields: Any
) -> tuple[rollout_pb2.RunGroupResponse, float]:
    settings = RolloutSettings(api_token=KEY, sandbox_target=sandbox)  # type: ignore[arg-type]
    router = SandboxRouter(sandbox, KEY)
    clients = OpenAIClients(settings)

    async def close() -> None:
        await clients.close()
        await router.close()

    async def connect(_: object) -> Connections:
        return Connections(clients, GrpcWorkspaces(router), HalfReward(), close)

    runner = GroupRunner(settings, connect=connect)
    await runner.start()
    task = rollout_pb2.GroupTask(
        job_id="job-agents",
        group_id=f"{environment}-{scenario}",
        environment=environment,
        scenario_id=scenario,
        rollouts=fields.pop("rollouts", 2),
        max_turns=fields.pop("max_turns", 3),
        model_base_url=policy[0],
        policy=policy[1],
        temperature=0.7,
        max_tokens=fields.pop("max_tokens", 64),
        max_context_tokens=2048,
        step=0,
        **fields,
    )
    start = time.perf_counter()
    try:
        response = await runner.run(task)
    finally:
        await runner.stop()
    return response, time.perf_counter() - start


async def test_single_turn_math(policy_url: tuple[str, str], sandbox_target: str) -> None:
    response, seconds = await _run_group(
        policy_url, sandbox_target, "math-single", "d1-001", rollouts=4, max_tokens=48
    )
    assert len(response.episodes) == 4 and not response.group.exceptions
    for episode in response.episodes:
        assert episode.agent == "single" and episode.finish == "answer"
        assert episode.expected_answer.isdigit()
    assert_trainable(response)
    print(f"single: 4 episodes in {seconds:.1f}s")


async def test_tool_agent_in_a_real_sandbox(
    policy_url: tuple[str, str], sandbox_target: str
) -> None:
    response, seconds = await _run_group(
        policy_url, sandbox_target, "tool-shell", "create-hello-file", max_turns=3
    )
    assert len(response.episodes) == 2 and not response.group.exceptions
    for episode, trajectory in zip(response.episodes, response.group.trajectories, strict=True):
        assert episode.agent == "tools" and episode.check_ran
        assert json.loads(trajectory.tools_json)[0]["function"]["name"] == "bash"
        assert episode.steps  # every turn left a step for process rewards
    assert_trainable(response)
    calls = sum(sum(e.tool_calls.values()) for e in response.episodes)
    print(f"tools: 2 episodes in {seconds:.1f}s, {calls} tool calls")


async def test_mcp_agent_plays_2048(
    policy_url: tuple[str, str], sandbox_target: str, mcp_2048_on_path: Path
) -> None:
    response, seconds = await _run_group(
        policy_url, sandbox_target, "game-2048", "2048-00", max_turns=3
    )
    assert len(response.episodes) == 2 and not response.group.exceptions
    for episode in response.episodes:
        assert episode.agent == "mcp" and episode.evaluated
        assert 0.0 < episode.evaluate_reward <= 1.0
    assert_trainable(response)
    rewards = [e.evaluate_reward for e in response.episodes]
    print(f"mcp: 2 episodes in {seconds:.1f}s, evaluate rewards {rewards}")


async def test_an_art_rollout_function_trains_exactly_what_it_sampled(
    policy_url: tuple[str, str], sandbox_target: str, tmp_path: Path
) -> None:
    # A package's ART rollout function (tests/support/art_quiz.py), run as written: two
    # turns with its own user message between them, each choice from model.openai_client().
    with pytest.MonkeyPatch.context() as patch:
        install_plugin(
            tmp_path, patch, "artfleet_test_quiz", PLUGIN, "[artfleet.environments]\n"
            "quiz = artfleet_test_quiz:quiz\n"
        )  # fmt: skip
        environments.reload_plugins()
        try:
            response, seconds = await _run_group(
                policy_url, sandbox_target, "quiz", "one-plus-one", max_tokens=24
            )
        finally:
            environments.reload_plugins()
    assert len(response.episodes) == 2 and not response.group.exceptions
    for episode in response.episodes:
        assert episode.agent == "art" and episode.finish == "rollout" and episode.turns == 2
    assert_trainable(response)
    print(f"art: 2 episodes in {seconds:.1f}s")
