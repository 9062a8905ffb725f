"""Reward math: every row of the process-reward table with its exact value, the test
rows, task_check, weights and spec validation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from artfleet.errors import InvalidArgument
from artfleet.v1 import common_pb2 as pb
from artfleet_reward.scorers import (
    ConfiguredScorer,
    InvalidSpec,
    ScorerFailed,
    process_reward,
    resolve_spec,
    score_episode,
    score_group,
    step_reward,
    task_check_reward,
)

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
                weight=s.get("weight", 0.0),
                params_json=json.dumps(s["params"]) if "params" in s else "",
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


# ---------------------------------------------------------------- specs and combinations

SOLVED = _episode(_bash(exit_code=0, code_modified=True), check_ran=True, check_passed=True)


def test_empty_spec_is_process_plus_task_check() -> None:
    [score] = score_group(pb.RewardSpec(), [SOLVED])
    assert score.components == {"process": approx(0.06), "task_check": 1.0}
    assert score.reward == approx(1.06)
    assert score_group(None, [SOLVED]) == [score]


def test_weights_and_zero_means_one() -> None:
    spec = _spec({"name": "process", "weight": 2.0}, {"name": "task_check"})
    [score] = score_group(spec, [SOLVED])
    assert score.reward == approx(2 * 0.06 + 1.0)
    assert score.components == {"process": approx(0.06), "task_check": 1.0}  # unweighted


def test_negative_weight_is_allowed() -> None:
    [score] = score_group(_spec({"name": "task_check", "weight": -0.5}), [SOLVED])
    assert score.reward == approx(-0.5)


def test_single_scorer_spec() -> None:
    [score] = score_group(_spec({"name": "task_check"}), [SOLVED])
    assert score.components == {"task_check": 1.0}
    assert score.reward == 1.0


def test_process_params_override_the_table() -> None:
    spec = _spec({"name": "process", "params": {"invalid_format": -0.5, "timeout": 0}})
    episode = _episode(pb.StepEvent(valid_format=False), _bash(timed_out=True, exit_code=124))
    [score] = score_group(spec, [episode])
    assert score.reward == approx(-0.5 + 0.01)


def test_group_scores_keep_order() -> None:
    failed = _episode(pb.StepEvent(valid_format=False))
    scores = score_group(pb.RewardSpec(), [SOLVED, failed, SOLVED])
    assert [s.reward for s in scores] == [approx(1.06), approx(-0.05), approx(1.06)]


@pytest.mark.parametrize(
    ("scorers", "field", "message"),
    [
        ([{"name": "process"}, {"name": "ruler"}], "reward[1].name", "unknown scorer 'ruler'"),
        ([{"name": ""}], "reward[0].name", "known: process, task_check"),
        ([{"name": "process"}, {"name": "process"}], "reward[1].name", "listed twice"),
        ([{"name": "process", "weight": float("nan")}], "reward[0].weight", "finite"),
        ([{"name": "process", "params": {"bonus": 1}}], "reward[0].params.bonus", "unknown"),
        ([{"name": "process", "params": {"timeout": "x"}}], "reward[0].params.timeout", "number"),
        ([{"name": "process", "params": {"timeout": True}}], "reward[0].params.timeout", "num"),
        ([{"name": "task_check", "params": {"x": 1}}], "reward[0].params.x", "no parameters"),
        ([{"name": "process", "params": [1]}], "reward[0].params", "JSON object"),
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


def test_params_that_are_not_json() -> None:
    spec = pb.RewardSpec(scorers=[pb.ScorerSpec(name="process", params_json="{oops")])
    with pytest.raises(InvalidSpec) as info:
        resolve_spec(spec)
    assert info.value.field == "reward[0].params"


def test_field_prefix_can_follow_the_request() -> None:
    with pytest.raises(InvalidSpec) as info:
        resolve_spec(_spec({"name": "nope"}), prefix="spec.scorers")
    assert info.value.field == "spec.scorers[0].name"


def test_a_failing_scorer_is_reported_by_name() -> None:
    [process, _] = resolve_spec(None)

    def broken(_: pb.Episode) -> float:
        raise ZeroDivisionError("x")

    scorers = [process, ConfiguredScorer("task_check", 1.0, broken)]
    with pytest.raises(ScorerFailed) as info:
        score_episode(scorers, SOLVED)
    assert info.value.scorer == "task_check"
    nan = [ConfiguredScorer("process", 1.0, lambda _: float("nan"))]
    with pytest.raises(ScorerFailed, match="nan"):
        score_episode(nan, SOLVED)
