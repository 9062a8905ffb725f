"""LLM judges against the real built-in server with SmolLM2-135M on CPU: structured
output (constrained decoding), RULER over a group and the absolute judge, both through
a real Reward gRPC server with the job's own policy as the judge.

One backend for the module (loading the model is the slow part); tiny max_tokens.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import jsonschema
import openai
import pytest
import pytest_asyncio
from openai import AsyncOpenAI
from prometheus_client import CollectorRegistry

from artfleet.contracts import codec
from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, reward_pb2_grpc
from artfleet_reward.metrics import RewardMetrics
from artfleet_reward.servicer import RewardServicer
from artfleet_reward.settings import RewardSettings
from artfleet_trainer.torch_backend.backend import TorchBackend

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

KEY = "reward-integration-key"
SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"type": "string", "enum": ["red", "green", "blue"]},
        "count": {"type": "integer"},
    },
    "required": ["color", "count"],
    "additionalProperties": False,
}


@dataclass
class Judge:
    client: AsyncOpenAI
    model: str
    base_url: str
    stub: reward_pb2_grpc.RewardStub
    registry: CollectorRegistry


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def judge(module_tmp: Callable[[str], Path]) -> AsyncIterator[Judge]:
    backend = TorchBackend(path=str(module_tmp("art")), api_key=KEY)
    model: art.TrainableModel[Any, Any] = art.TrainableModel(
        name="judge", project="it", base_model="smollm2-135m-instruct"
    )
    await model.register(backend)
    assert model.inference_base_url is not None
    client = AsyncOpenAI(base_url=model.inference_base_url, api_key=KEY, max_retries=0)
    registry = CollectorRegistry()
    # The reward service's token is the fleet token, which the policy endpoint accepts.
    settings = RewardSettings(api_token=KEY)  # type: ignore[arg-type]
    server = grpc.aio.server()
    servicer = RewardServicer(RewardMetrics(registry), settings)
    reward_pb2_grpc.add_RewardServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield Judge(
            client,
            model.get_inference_name(),
            model.inference_base_url,
            reward_pb2_grpc.RewardStub(channel),
            registry,
        )
    finally:
        await channel.close()
        await server.stop(None)
        await client.close()
        await backend.close()


async def _ask(judge: Judge, **kwargs: Any) -> Any:
    return await judge.client.chat.completions.create(
        model=judge.model,
        messages=[{"role": "user", "content": "Name a color and a number, as JSON."}],
        max_tokens=kwargs.pop("max_tokens", 40),
        temperature=kwargs.pop("temperature", 0.0),
        **kwargs,
    )


async def test_json_schema_output_validates_and_batches_with_free_text(judge: Judge) -> None:
    start = time.monotonic()
    fmt = {"type": "json_schema", "json_schema": {"name": "pick", "schema": SCHEMA}}
    constrained, free, any_object = await asyncio.gather(
        _ask(judge, response_format=fmt),
        _ask(judge, max_tokens=12),
        _ask(judge, response_format={"type": "json_object"}),
    )
    elapsed = time.monotonic() - start
    value = json.loads(constrained.choices[0].message.content)
    jsonschema.validate(value, SCHEMA)
    assert constrained.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(any_object.choices[0].message.content), dict)
    assert free.choices[0].message.content  # unconstrained text, same batch
    print(f"3 requests (2 constrained) in {elapsed:.2f}s; {value}")


async def test_invalid_response_format_is_an_openai_400(judge: Judge) -> None:
    bad_schemas = [
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}},
        {"type": "json_schema", "json_schema": {"name": "x"}},
        {"type": "xml"},
    ]
    for fmt in bad_schemas:
        with pytest.raises(openai.BadRequestError) as info:
            await _ask(judge, response_format=fmt, max_tokens=4)
        error = info.value.body
        assert isinstance(error, dict) and str(error["param"]).startswith("response_format"), error


def _trajectory(answer: str, reward: float) -> pb.Trajectory:
    items: list[Any] = [
        {"role": "system", "content": "Answer the arithmetic question with a number."},
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": answer},
    ]
    trajectory = art.Trajectory(messages_and_choices=items, reward=reward)
    return codec.trajectory_to_proto(trajectory)


def _request(judge: Judge, *scorers: pb.ScorerSpec) -> reward_pb2.ScoreGroupRequest:
    spec = pb.RewardSpec(scorers=list(scorers))
    spec.policy.model, spec.policy.base_url = judge.model, judge.base_url  # as the trainer does
    solved = pb.Episode(check_ran=True, check_passed=True)
    return reward_pb2.ScoreGroupRequest(
        group=pb.TrajectoryGroup(trajectories=[_trajectory("4", 0.0), _trajectory("5", 0.0)]),
        episodes=[solved, pb.Episode(check_ran=True)],
        spec=spec,
    )


async def test_ruler_with_the_policy_as_judge(judge: Judge) -> None:
    params = {"judge": "policy", "max_tokens": 120}
    request = _request(
        judge,
        pb.ScorerSpec(name="task_check", weight=2.0),
        pb.ScorerSpec(name="ruler", params_json=json.dumps(params), on_error="fail_job"),
    )
    start = time.monotonic()
    response = await judge.stub.ScoreGroup(request, timeout=120)
    elapsed = time.monotonic() - start
    assert not response.outcome.failures and not response.outcome.fail_job
    independent = [2.0, 0.0]  # task_check x 2: what the reward would be without RULER
    for score, kept in zip(response.scores, independent, strict=True):
        ruler = score.metrics["ruler_score"]
        assert 0.0 <= ruler <= 1.0
        assert score.reward == pytest.approx(ruler)  # RULER's score replaces the reward
        assert score.HasField("independent_reward") and score.independent_reward == kept
        assert any(line.startswith("RULER explanation") for line in score.logs)
    seconds = judge.registry.get_sample_value(
        "artfleet_reward_judge_seconds_count", {"scorer": "ruler"}
    )
    assert seconds == 1
    await _wait_for_tokens(judge, "ruler")
    print(f"RULER over 2 trajectories: {elapsed:.2f}s")


async def test_absolute_judge_with_cache(judge: Judge) -> None:
    params = {"judge": "policy", "max_tokens": 48, "rubric": "1 if the answer is 4, else 0."}
    request = _request(judge, pb.ScorerSpec(name="judge", params_json=json.dumps(params)))
    start = time.monotonic()
    first = await judge.stub.ScoreGroup(request, timeout=120)
    elapsed = time.monotonic() - start
    assert not first.outcome.failures
    assert all(0.0 <= s.reward <= 1.0 for s in first.scores)
    again = await judge.stub.ScoreGroup(request, timeout=30)  # same trajectories: cached
    assert [s.reward for s in again.scores] == [s.reward for s in first.scores]

    def cache(result: str) -> float | None:
        labels = {"scorer": "judge", "result": result}
        return judge.registry.get_sample_value("artfleet_reward_judge_cache_total", labels)

    assert (cache("miss"), cache("hit")) == (2, 2)
    await _wait_for_tokens(judge, "judge")
    print(f"judge over 2 trajectories: {elapsed:.2f}s")


async def _wait_for_tokens(judge: Judge, scorer: str) -> None:
    """litellm reports usage from a callback task, just after the call returns."""
    labels = {"scorer": scorer, "kind": "completion"}
    for _ in range(50):
        value = judge.registry.get_sample_value("artfleet_reward_judge_tokens_total", labels)
        if value:
            return
        await asyncio.sleep(0.1)
    pytest.fail(f"no judge tokens counted for {scorer}")
