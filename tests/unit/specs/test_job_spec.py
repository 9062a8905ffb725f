from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import (
    JobSpecModel,
    ScorerModel,
    spec_from_proto,
    spec_to_proto,
    validate_spec,
    with_default_reward,
)
from artfleet.specs.scorer_params import JudgeParams, ProcessParams, RulerParams
from artfleet.v1 import common_pb2 as pb
from artfleet_cli.jobs import load_spec


def test_proto_round_trip_keeps_every_field() -> None:
    spec = JobSpecModel(
        name="x",
        steps=7,
        temperature=0.0,
        seed=0,
        reward=[ScorerModel(name="process", weight=2.0, params={"timeout": -0.1})],
    )
    assert spec_from_proto(spec_to_proto(spec)) == spec


def test_round_trip_keeps_gates_clips_and_failure_policies() -> None:
    spec = validate_spec(
        {
            "reward": [
                {"name": "tests", "on_error": "zero", "clip": {"max": 1.0}},
                {
                    "name": "ruler",
                    "weight": 0.5,
                    "params": {"judge": "policy"},
                    "gate": {"scorer": "tests", "min": 0.5},
                    "on_error": "fail_job",
                },
                {"name": "process", "gate": {"scorer": "tests"}, "clip": {"min": -1, "max": 1}},
            ],
            "reward_clip": {"min": -2.0},
        }
    )
    assert spec_from_proto(spec_to_proto(spec)) == spec
    assert spec.reward[2].on_error == "drop_group" and spec.reward[2].gate is not None
    assert spec.reward[2].gate.min == 1.0


def test_unset_proto_fields_take_the_defaults() -> None:
    assert spec_from_proto(pb.JobSpec()) == JobSpecModel()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"steps": 0}, "steps"),
        ({"rollouts_per_group": 1}, "rollouts_per_group"),
        ({"name": "Bad Name"}, "name"),
        ({"backend": "jax"}, "backend"),
        ({"reward": [{"name": "process"}, {"weight": 1}]}, "reward[1].name"),
        ({"stepz": 3}, "stepz"),
        ({"reward": [{"name": "tests", "on_error": "retry"}]}, "reward[0].on_error"),
        ({"reward": [{"name": "tests", "gate": {"min": 1}}]}, "reward[0].gate.scorer"),
        ({"reward": [{"name": "tests", "clip": {"min": 2, "max": 1}}]}, "reward[0].clip"),
        ({"reward_clip": {"low": 0}}, "reward_clip.low"),
    ],
)
def test_invalid_specs_name_the_field(data: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec(data)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_bad_params_json_names_the_field() -> None:
    message = pb.JobSpec(reward=pb.RewardSpec(scorers=[pb.ScorerSpec(name="p", params_json="{")]))
    with pytest.raises(InvalidArgument) as info:
        spec_from_proto(message)
    assert info.value.field == "reward[0].params"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "artfleet_cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"ARTFLEET_API_TOKEN": "t", "PATH": "/usr/bin"},
    )


def test_cli_rejects_a_bad_spec_with_exit_2(tmp_path: Path) -> None:
    result = _cli("jobs", "submit", "--steps", "0", "--target", "127.0.0.1:1")
    assert result.returncode == 2
    assert "steps" in result.stderr and "Traceback" not in result.stderr
    job = tmp_path / "job.yaml"
    job.write_text("steps: 2\nrollouts_per_group: one\n")
    result = _cli("jobs", "submit", str(job))
    assert result.returncode == 2 and "rollouts_per_group" in result.stderr
    job.write_text(json.dumps([1, 2]))
    assert _cli("jobs", "submit", str(job)).returncode == 2


def test_cli_unreachable_trainer_is_exit_1() -> None:
    result = _cli("jobs", "list", "--target", "127.0.0.1:1")
    assert result.returncode == 1
    assert "cannot reach the trainer" in result.stderr and "Traceback" not in result.stderr


# ---------------------------------------------------------------- the reward part


def test_weight_zero_stays_zero_through_yaml_and_proto(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("reward:\n  - name: process\n    weight: 0\n  - name: task_check\n")
    spec = load_spec(job, {})
    assert [s.weight for s in spec.reward] == [0.0, 1.0]
    message = spec_to_proto(spec)
    zero, default = message.reward.scorers
    assert zero.HasField("weight") and zero.weight == 0.0  # explicit: not "unset"
    assert default.HasField("weight") and default.weight == 1.0
    assert spec_from_proto(message).reward[0].weight == 0.0


def test_an_unset_weight_is_one() -> None:
    message = pb.JobSpec(reward=pb.RewardSpec(scorers=[pb.ScorerSpec(name="tests")]))
    assert spec_from_proto(message).reward[0].weight == 1.0
    assert validate_spec({"reward": [{"name": "tests"}]}).reward[0].weight == 1.0


def test_builtin_params_come_back_typed_with_their_defaults() -> None:
    spec = validate_spec(
        {
            "reward": [
                {"name": "ruler", "params": {"judge": "policy"}},
                {"name": "judge", "params": {"judge": {"base_url": "http://j/v1", "model": "m"}}},
                {"name": "process", "params": {"timeout": -0.5}},
                {"name": "my_bonus", "params": {"anything": [1, 2]}},  # custom: the service checks
            ]
        }
    )
    ruler, judge, process, custom = (s.options() for s in spec.reward)
    assert isinstance(ruler, RulerParams) and ruler.max_tokens == 512 and ruler.bounded
    assert ruler.combine == "replace" and ruler.rubric is None  # None: ART's rubric
    assert isinstance(judge, JudgeParams) and judge.max_tokens == 256 and not judge.bounded
    assert isinstance(process, ProcessParams)
    assert (process.timeout, process.valid_command) == (-0.5, 0.01)
    assert custom is None
    assert spec.reward[2].params == {"timeout": -0.5}  # params stay as written


JUDGE = {"base_url": "http://judge/v1", "model": "m"}


@pytest.mark.parametrize(
    ("reward", "field", "message"),
    [
        (
            [{"name": "process"}, {"name": "ruler", "params": {"judge": {"base_url": "http://x"}}}],
            "reward[1].params.judge.model",
            "is required",
        ),
        ([{"name": "ruler", "params": {"judge": "me"}}], "reward[0].params.judge", "object"),
        (
            [{"name": "judge", "params": {"judge": {**JUDGE, "api_key_env": "not a name"}}}],
            "reward[0].params.judge.api_key_env",
            "environment variable",
        ),
        ([{"name": "process", "params": {"bonus": 1}}], "reward[0].params.bonus", "known: "),
        ([{"name": "process", "params": {"timeout": True}}], "reward[0].params.timeout", "number"),
        ([{"name": "task_check", "params": {"x": 1}}], "reward[0].params.x", "no parameters"),
        (
            [{"name": "judge", "params": {"judge": "policy", "max_tokens": 0}}],
            "reward[0].params.max_tokens",
            "an integer in [1, 32768]",
        ),
        ([{"name": "answer_check", "params": {"mode": "fuzzy"}}], "reward[0].params.mode", "exact"),
        (
            [{"name": "tests"}, {"name": "process", "gate": {"scorer": "judge"}}],
            "reward[1].gate.scorer",
            "not a scorer listed before",
        ),
        ([{"name": "tests"}, {"name": "tests"}], "reward[1].name", "listed twice"),
        ([{"name": ""}], "reward[0].name", "known: answer_check, judge, mcp_evaluate"),
        ([{"name": "tests", "weight": float("inf")}], "reward[0].weight", "finite"),
        ([{"name": "tests", "weight": "2"}], "reward[0].weight", "number"),
    ],
)
def test_reward_mistakes_name_the_field(
    reward: list[dict[str, object]], field: str, message: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec({"reward": reward})
    assert info.value.field == field
    assert message in str(info.value) and str(info.value).startswith(f"{field}: ")


def test_the_trainer_rejects_the_same_reward_mistakes_from_proto() -> None:
    scorer = pb.ScorerSpec(name="ruler", params_json=json.dumps({"judge": {"model": "m"}}))
    message = pb.JobSpec(reward=pb.RewardSpec(scorers=[pb.ScorerSpec(name="tests"), scorer]))
    with pytest.raises(InvalidArgument) as info:
        spec_from_proto(message)
    assert info.value.field == "reward[1].params.judge.base_url"


def test_a_spec_without_reward_gets_its_agent_kinds_default_at_the_trainer() -> None:
    spec = validate_spec({"environment": "game-2048"})
    # No scorers travel: the trainer knows the environment's agent kind, the CLI does not.
    assert not spec_to_proto(spec).reward.scorers
    assert not spec_from_proto(spec_to_proto(spec)).model_fields_set & {"reward"}
    written = with_default_reward(spec, "mcp")
    assert [s.name for s in written.reward] == ["mcp_evaluate"]
    assert [s.name for s in spec_to_proto(written).reward.scorers] == ["mcp_evaluate"]
    assert [s.name for s in with_default_reward(spec, "terminal").reward] == [
        "process",
        "task_check",
    ]
    chosen = validate_spec({"environment": "game-2048", "reward": [{"name": "process"}]})
    assert [s.name for s in with_default_reward(chosen, "mcp").reward] == ["process"]
