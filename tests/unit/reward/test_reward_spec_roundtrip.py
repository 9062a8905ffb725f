"""The reward spec end to end, as a job carries it: YAML (the CLI) -> JobSpecModel ->
proto (SubmitJob) -> the trainer's spec_from_proto -> the reward spec it sends each step
-> the reward service, which scores with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from verdicts import with_verdict

from artfleet.specs.job import reward_spec_proto, spec_from_proto, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2
from artfleet_cli.jobs import load_spec
from artfleet_reward.metrics import RewardMetrics
from artfleet_reward.servicer import RewardServicer

PROCESS_PER_STEP = 0.01 + 0.02  # a valid bash command that succeeded


def _reward_spec_via_the_trainer(tmp_path: Path, yaml_text: str) -> pb.RewardSpec:
    job = tmp_path / "job.yaml"
    job.write_text(yaml_text)
    submitted = spec_to_proto(load_spec(job, {}))  # what the CLI sends
    return reward_spec_proto(spec_from_proto(submitted))  # what the trainer sends each step


def _request(spec: pb.RewardSpec) -> reward_pb2.ScoreGroupRequest:
    episodes = [
        pb.Episode(
            steps=[pb.StepEvent(valid_format=True, executed=True, exit_code=0)],
            check_ran=True,
            check_passed=passed,
        )
        for passed in (True, False)
    ]
    return reward_pb2.ScoreGroupRequest(
        group=pb.TrajectoryGroup(trajectories=[pb.Trajectory(), pb.Trajectory()]),
        episodes=episodes,
        spec=spec,
    )


async def test_weight_zero_is_computed_and_logged_but_not_counted(tmp_path: Path) -> None:
    spec = _reward_spec_via_the_trainer(
        tmp_path, "reward:\n  - name: task_check\n    weight: 0\n  - name: process\n"
    )
    servicer = RewardServicer(RewardMetrics(CollectorRegistry()))
    validated = await servicer.ValidateSpec(reward_pb2.ValidateSpecRequest(spec=spec), None)
    assert list(validated.scorers) == ["task_check", "process"]
    request = _request(spec)
    response = await servicer.score(request)
    passed, failed = response.scores
    assert passed.components["task_check"] == 1.0  # computed
    assert failed.components["task_check"] == 0.0
    # ... and not counted: only process (weight unset = 1.0) makes the reward.
    assert passed.reward == pytest.approx(PROCESS_PER_STEP, abs=1e-12)
    assert failed.reward == pytest.approx(PROCESS_PER_STEP, abs=1e-12)
    logged = with_verdict(request.group, response).trajectories[0]
    assert logged.metrics["reward_task_check"].float_value == 1.0


async def test_an_unset_weight_counts_fully(tmp_path: Path) -> None:
    spec = _reward_spec_via_the_trainer(tmp_path, "reward:\n  - name: task_check\n")
    assert spec.scorers[0].HasField("weight") and spec.scorers[0].weight == 1.0
    spec.scorers[0].ClearField("weight")  # a caller that leaves it unset gets the default too
    assert not spec.scorers[0].HasField("weight")
    response = await RewardServicer(RewardMetrics(CollectorRegistry())).score(_request(spec))
    assert [s.reward for s in response.scores] == [1.0, 0.0]


async def test_the_default_spec_survives_the_trip(tmp_path: Path) -> None:
    spec = _reward_spec_via_the_trainer(tmp_path, "steps: 2\n")
    assert [(s.name, s.weight, s.on_error) for s in spec.scorers] == [
        ("process", 1.0, "drop_group"),
        ("task_check", 1.0, "drop_group"),
    ]
    response = await RewardServicer(RewardMetrics(CollectorRegistry())).score(_request(spec))
    assert [s.reward for s in response.scores] == [
        pytest.approx(PROCESS_PER_STEP + 1.0, abs=1e-12),
        pytest.approx(PROCESS_PER_STEP, abs=1e-12),
    ]
