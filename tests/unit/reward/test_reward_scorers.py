"""Reward math: every row of the process-reward table with its exact value, the test
rows, the `tests` and task_check scorers, MCP result mapping, and spec validation (each
mistake names its field)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from artfleet.contracts.errors import InvalidArgument
from artfleet.v1 import common_pb2 as pb
from artfleet_reward.scorers.base import InvalidSpec
from artfleet_reward.scorers.mcp import reward_of
from artfleet_reward.scorers.process import (
    pass_rate_score,
    process_reward,
    step_reward,
    task_check_reward,
)
from artfleet_reward.spec import resolve_spec

TIGHT = 1e-12


def approx(value: float) -> Any:
    return pytest.approx(value, abs=TIGHT)


def _episode(*steps: pb.StepEvent, **fields: Any) -> pb.Episode:
    return pb.Episode(steps=list(steps), **fields)


def _bash(**fields: Any) -> pb.StepEvent:
    """A valid, executed bash step that failed (exit 1): earns only the valid-command row."""
    base: dict[str, Any] = {"valid_format": True, "executed": True, "exit_code": 1}
    base.update(fields)
    return pb.StepEvent(**base)


def _spec(*scorers: dict[str, Any]) -> pb.RewardSpec:
    return pb.RewardSpec(
        scorers=[
            pb.ScorerSpec(
                name=s["name"],
                weight=s.get("weight"),  # absent = unset = the default
                params_json=json.dumps(s["params"]) if "params" in s else "",
                on_error=s.get("on_error", ""),
                gate=pb.Gate(**s["gate"]) if "gate" in s else None,
                clip=pb.Range(**s["clip"]) if "clip" in s else None,
            )
            for s in scorers
        ]
    )


# ---------------------------------------------------------------- one test per table row


def test_row_valid_bash_command() -> None:
    assert step_reward(_bash()) == approx(0.01)


def test_row_command_succeeds() -> None:
    assert step_reward(_bash(exit_code=0)) - step_reward(_bash()) == approx(0.02)
    assert step_reward(_bash(exit_code=0)) == approx(0.03)


def test_row_code_modified() -> None:
    assert step_reward(_bash(code_modified=True)) == approx(0.01 + 0.03)


def test_row_tests_discovered() -> None:
    assert step_reward(_bash(tests_discovered=True)) == approx(0.01 + 0.02)


def test_row_invalid_format() -> None:
    assert step_reward(pb.StepEvent(valid_format=False)) == approx(-0.05)


def test_row_timeout() -> None:
    assert step_reward(_bash(timed_out=True, exit_code=0)) == approx(0.01 - 0.02)


def test_row_all_tests_pass() -> None:
    tests = pb.TestSummary(passed=4, total=4)
    assert process_reward(_episode(tests=tests)) == approx(1.0)


def test_row_partial_pass() -> None:
    tests = pb.TestSummary(passed=3, failed=1, total=4)
    assert process_reward(_episode(tests=tests)) == approx(0.5 * 0.75)


# ---------------------------------------------------------------- edges and combinations


def test_no_tests_no_test_reward() -> None:
    assert process_reward(_episode()) == 0.0
    assert process_reward(_episode(tests=pb.TestSummary(total=0))) == 0.0


def test_zero_passing_tests_earn_nothing() -> None:
    assert process_reward(_episode(tests=pb.TestSummary(failed=2, total=2))) == approx(0.0)


def test_errored_tests_count_in_the_total() -> None:
    tests = pb.TestSummary(passed=1, errored=1, total=2)
    assert process_reward(_episode(tests=tests)) == approx(0.25)


def test_counts_without_total_still_score() -> None:
    assert process_reward(_episode(tests=pb.TestSummary(passed=2, failed=2))) == approx(0.25)


def test_submit_earns_nothing() -> None:
    submit = pb.StepEvent(valid_format=True, is_submit=True)
    assert step_reward(submit) == 0.0


def test_unexecuted_step_does_not_succeed() -> None:
    # exit_code 0 is the proto default: without `executed` it proves nothing.
    assert step_reward(pb.StepEvent(valid_format=True)) == approx(0.01)


def test_invalid_step_earns_only_its_penalty() -> None:
    weird = pb.StepEvent(valid_format=False, code_modified=True, tests_discovered=True)
    assert step_reward(weird) == approx(-0.05)


def test_all_step_rows_at_once() -> None:
    step = _bash(exit_code=0, code_modified=True, tests_discovered=True)
    assert step_reward(step) == approx(0.01 + 0.02 + 0.03 + 0.02)


def test_a_whole_episode() -> None:
    episode = _episode(
        pb.StepEvent(valid_format=False),  # -0.05
        _bash(exit_code=0, tests_discovered=True),  # 0.01 + 0.02 + 0.02
        _bash(exit_code=0, code_modified=True),  # 0.01 + 0.02 + 0.03
        _bash(timed_out=True, exit_code=124),  # 0.01 - 0.02
        pb.StepEvent(valid_format=True, is_submit=True),  # 0
        tests=pb.TestSummary(passed=1, failed=3, total=4),  # 0.5 * 0.25
        check_passed=True,
    )
    expected = -0.05 + 0.05 + 0.06 - 0.01 + 0.125
    assert process_reward(episode) == approx(expected)


def test_task_check() -> None:
    assert task_check_reward(_episode(check_ran=True, check_passed=True)) == 1.0
    assert task_check_reward(_episode(check_ran=True, check_passed=False)) == 0.0
    assert task_check_reward(_episode()) == 0.0


# ---------------------------------------------------------------- the `tests` scorer


def test_pass_rate_scorer_all_pass_partial_and_none() -> None:
    assert pass_rate_score(pb.TestSummary(passed=3, total=3), 1.0, 0.5) == 1.0
    assert pass_rate_score(pb.TestSummary(passed=1, failed=3, total=4), 1.0, 0.5) == approx(0.125)
    assert pass_rate_score(pb.TestSummary(), 1.0, 0.5) == 0.0
    assert pass_rate_score(pb.TestSummary(passed=1, failed=1), 2.0, 1.0) == approx(0.5)


# ---------------------------------------------------------------- MCP evaluate results


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.5, (0.5, None)),
        (1, (1.0, None)),
        ({"reward": 0.25}, (0.25, None)),
        ({"done": True, "reward": 1.0}, (1.0, True)),
        ({"result": 0.75}, (0.75, None)),
        ({"result": {"done": False, "reward": 0.1}}, (0.1, False)),
        ("0.3", (0.3, None)),
        ('{"reward": 0.9, "done": true}', (0.9, True)),
    ],
)
def test_mcp_results_map_to_rewards(value: Any, expected: tuple[float, bool | None]) -> None:
    assert reward_of(value) == expected


@pytest.mark.parametrize("value", ["great job", {"score": 1}, True, float("nan"), None, [1]])
def test_mcp_results_that_are_no_reward(value: Any) -> None:
    with pytest.raises(ValueError):
        reward_of(value)


# ---------------------------------------------------------------- specs


def test_empty_spec_is_process_plus_task_check() -> None:
    assert resolve_spec(pb.RewardSpec()).names == ["process", "task_check"]
    assert resolve_spec(None).names == ["process", "task_check"]


def test_a_full_spec_resolves() -> None:
    spec = _spec(
        {"name": "tests", "params": {"partial": 0.25}, "on_error": "zero"},
        {"name": "process", "weight": 0.5, "clip": {"min": -1, "max": 1}},
        {
            "name": "ruler",
            "params": {"judge": "policy", "rubric": "be strict", "max_tokens": 64},
            "gate": {"scorer": "tests"},
            "on_error": "drop_group",
        },
        {
            "name": "judge",
            "params": {"judge": {"base_url": "http://judge:8000/v1", "model": "m"}},
            "on_error": "fail_job",
        },
        {
            "name": "mcp_evaluate",
            "params": {"mcp_config": {"local": {"command": "docker", "args": ["run", "-i", "x"]}}},
            "on_error": "drop_trajectory",
        },
    )
    spec.clip.CopyFrom(pb.Range(max=2.0))
    resolved = resolve_spec(spec)
    assert resolved.names == ["tests", "process", "ruler", "judge", "mcp_evaluate"]
    gate = resolved.entries[2].spec.gate
    assert gate is not None and gate.min == 1.0
    assert resolved.clip is not None and resolved.clip.clamp(5.0) == 2.0
    assert [e.spec.on_error for e in resolved.entries] == [
        "zero",
        "drop_group",
        "drop_group",
        "fail_job",
        "drop_trajectory",
    ]


JUDGE = {"base_url": "http://judge/v1", "model": "m"}
SERVER = {"command": "python", "args": ["server.py"]}


@pytest.mark.parametrize(
    ("scorers", "field", "message"),
    [
        ([{"name": "process"}, {"name": "rulr"}], "reward[1].name", "unknown scorer 'rulr'"),
        (
            [{"name": ""}],
            "reward[0].name",
            "known: answer_check, judge, mcp_evaluate, process, rollout_reward, ruler",
        ),
        ([{"name": "process"}, {"name": "process"}], "reward[1].name", "listed twice"),
        ([{"name": "process", "weight": float("nan")}], "reward[0].weight", "finite"),
        ([{"name": "process", "params": {"bonus": 1}}], "reward[0].params.bonus", "unknown"),
        ([{"name": "process", "params": {"timeout": "x"}}], "reward[0].params.timeout", "number"),
        ([{"name": "process", "params": {"timeout": True}}], "reward[0].params.timeout", "num"),
        ([{"name": "task_check", "params": {"x": 1}}], "reward[0].params.x", "no parameters"),
        ([{"name": "process", "params": [1]}], "reward[0].params", "JSON object"),
        ([{"name": "tests", "params": {"partial": "half"}}], "reward[0].params.partial", "num"),
        ([{"name": "process", "on_error": "retry"}], "reward[0].on_error", "drop_group"),
        ([{"name": "process", "clip": {"min": 1, "max": 0}}], "reward[0].clip", "above max"),
        (
            [{"name": "process"}, {"name": "tests", "gate": {"scorer": "judge"}}],
            "reward[1].gate.scorer",
            "not a scorer listed before",
        ),
        ([{"name": "ruler"}], "reward[0].params.judge", "is required"),
        ([{"name": "ruler", "params": {"judge": "me"}}], "reward[0].params.judge", "object"),
        (
            [{"name": "process"}, {"name": "ruler", "params": {"judge": {"base_url": "http://x"}}}],
            "reward[1].params.judge.model",
            "is required",
        ),
        (
            [{"name": "judge", "params": {"judge": {**JUDGE, "base_url": "ftp://x"}}}],
            "reward[0].params.judge.base_url",
            "http(s)",
        ),
        (
            [{"name": "judge", "params": {"judge": {**JUDGE, "api_key": "sk-123"}}}],
            "reward[0].params.judge.api_key",
            "unknown parameter",
        ),
        (
            [{"name": "judge", "params": {"judge": {**JUDGE, "api_key_env": "NOT_SET_ANYWHERE"}}}],
            "reward[0].params.judge.api_key_env",
            "not set in the reward service's environment",
        ),
        (
            [{"name": "ruler", "params": {"judge": "policy", "temperature": 9}}],
            "reward[0].params.temperature",
            "[0, 2]",
        ),
        (
            [{"name": "judge", "params": {"judge": "policy", "max_tokens": 0}}],
            "reward[0].params.max_tokens",
            "integer",
        ),
        (
            [{"name": "answer_check", "params": {"mode": "regex", "pattern": "("}}],
            "reward[0].params.pattern",
            "not a regular expression",
        ),
        (
            [{"name": "answer_check", "params": {"tolerance": -1}}],
            "reward[0].params.tolerance",
            "0",
        ),
        (
            [{"name": "mcp_evaluate", "params": {"server": {"args": []}}}],
            "reward[0].params.server.command",
            "is required",
        ),
        (
            [{"name": "mcp_evaluate", "params": {"mcp_config": {"cloud": SERVER}}}],
            "reward[0].params.mcp_config",
            "local, ssh",
        ),
        (
            [{"name": "mcp_evaluate", "params": {"server": SERVER, "evaluate": {"tool": ""}}}],
            "reward[0].params.evaluate.tool",
            "non-empty",
        ),
    ],
)
def test_invalid_specs_name_the_field(
    scorers: list[dict[str, Any]], field: str, message: str
) -> None:
    with pytest.raises(InvalidSpec) as info:
        resolve_spec(_spec(*scorers))
    assert info.value.field == field
    assert message in info.value.reason
    assert str(info.value).startswith(f"{field}: ")
    assert isinstance(info.value, InvalidArgument)  # the shared interceptor maps it


def test_total_clip_is_checked() -> None:
    spec = pb.RewardSpec(clip=pb.Range(min=2, max=1))
    with pytest.raises(InvalidSpec) as info:
        resolve_spec(spec)
    assert info.value.field == "reward_clip"


def test_params_that_are_not_json() -> None:
    spec = pb.RewardSpec(scorers=[pb.ScorerSpec(name="process", params_json="{oops")])
    with pytest.raises(InvalidSpec) as info:
        resolve_spec(spec)
    assert info.value.field == "reward[0].params"


def test_field_prefix_can_follow_the_request() -> None:
    with pytest.raises(InvalidSpec) as info:
        resolve_spec(_spec({"name": "nope"}), prefix="spec.scorers")
    assert info.value.field == "spec.scorers[0].name"
