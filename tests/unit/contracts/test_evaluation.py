"""pass@k, avg@k and the paired comparison of two evaluations."""

from __future__ import annotations

import itertools

import pytest

from artfleet.contracts import evaluation
from artfleet.v1 import common_pb2 as pb


def brute_pass_at_k(outcomes: list[bool], k: int) -> float:
    """The definition: the share of k-subsets with at least one success."""
    subsets = list(itertools.combinations(outcomes, k))
    return sum(any(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 2, 2), (4, 1, 3), (6, 0, 2), (3, 3, 1), (8, 3, 4)])
def test_the_estimator_equals_the_count_over_subsets(n: int, c: int, k: int) -> None:
    outcomes = [True] * c + [False] * (n - c)
    assert evaluation.pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(outcomes, k))


def test_pass_at_k_by_hand() -> None:
    assert evaluation.pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)
    assert evaluation.pass_at_k(2, 1, 2) == 1.0
    assert evaluation.pass_at_k(0, 0, 2) == 0.0
    assert evaluation.pass_at_k(1, 1, 4) == 1.0  # fewer samples than k: k = n


def _result(scenario: str, passed: list[bool]) -> pb.EvalTaskResult:
    return pb.EvalTaskResult(
        scenario_id=scenario,
        rewards=[float(p) for p in passed],
        successes=sum(passed),
        samples=len(passed),
    )


def test_summary_counts_missing_tasks_as_unsolved() -> None:
    results = [_result("a", [True, False]), _result("b", []), _result("c", [False, False])]
    summary = evaluation.summarize(results, k=2, split="test", step=3)
    assert summary.tasks == 3
    assert summary.pass_at_k == pytest.approx(1 / 3)
    assert summary.avg_at_k == pytest.approx(0.25)  # over answered tasks: (0.5 + 0) / 2
    assert summary.success_rate == pytest.approx(1 / 4)


def test_compare_gives_per_task_deltas_and_a_paired_test() -> None:
    a = evaluation.summarize(
        [_result(f"t{i}", [False, False]) for i in range(10)] + [_result("only_a", [True])],
        k=2,
        split="test",
    )
    b = evaluation.summarize(
        [_result(f"t{i}", [True, i % 2 == 0]) for i in range(10)], k=2, split="test"
    )
    result = evaluation.compare(a, b, metric="success")
    assert [r.scenario_id for r in result.rows] == [f"t{i}" for i in range(10)]
    assert result.rows[0].delta == 1.0 and result.rows[1].delta == 0.5
    assert result.mean_delta == pytest.approx(0.75)
    assert result.only_a == ["only_a"] and result.only_b == []
    assert (result.wins, result.losses, result.ties) == (10, 0, 0)
    assert result.sign_p == pytest.approx(2 / 2**10)
    low, high = result.ci95
    assert 0.5 <= low <= 0.75 <= high <= 1.0


def test_sign_test_and_bootstrap_of_no_difference() -> None:
    assert evaluation.sign_test(0, 0) == 1.0
    assert evaluation.sign_test(3, 3) == 1.0
    assert evaluation.bootstrap_ci([0.0, 0.0, 0.0]) == (0.0, 0.0)
    with pytest.raises(ValueError, match="unknown metric"):
        evaluation.task_score(_result("a", [True]), "accuracy", 2)


def test_a_comparison_row_scores_both_sides_on_the_paired_tasks_and_counts_the_dropped() -> None:
    a = evaluation.summarize(
        [_result("t0", [False, False]), _result("t1", [True, True]), _result("a", [True])],
        k=2,
        split="test",
    )
    b = evaluation.summarize(
        [_result("t0", [True, False]), _result("t1", [True, True]), _result("b", [False])],
        k=2,
        split="test",
    )
    result = evaluation.compare(a, b)
    assert (result.mean_a, result.mean_b) == (0.5, 0.75)  # "a" and "b" are not paired
    assert result.dropped == 2


def _answered(*versions: int | None) -> list[pb.Trajectory]:
    out = []
    for version in versions:
        trajectory = pb.Trajectory()
        if version is not None:
            trajectory.initial_policy_version = trajectory.final_policy_version = version
        out.append(trajectory)
    return out


def test_the_served_policy_is_the_step_the_answers_named() -> None:
    # `agent@best` served as agent@3: every answer named step 3.
    assert evaluation.served_policy("agent@3", _answered(3, 3, None)) == "agent@3"
    # A running job's best moved during the evaluation: both steps answered.
    assert evaluation.served_policy("agent@3", _answered(3, 4)) == "agent@3,4"
    # An endpoint that names no step: its versions are the dispatch default, not answers.
    assert evaluation.served_policy("gpt-4o-mini", _answered(0, 0)) == "gpt-4o-mini"
    assert evaluation.served_policy("", _answered(0)) == ""
    assert evaluation.served_policy("agent@3", []) == "agent@3"
