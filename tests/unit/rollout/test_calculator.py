"""The calculator environment's problems: fixed, split, solvable by their two steps."""

from __future__ import annotations

import pytest

from artfleet_rollout.bundled import calculator
from artfleet_rollout.bundled.calculator import Problem, Step
from artfleet_rollout.environments import get_environment


def test_problems_are_fixed_and_split_per_form() -> None:
    first, again = calculator.problems(), calculator.problems()
    assert first == again and len(first) == 4 * calculator.PER_FORM
    environment = get_environment("calculator")
    assert environment.agent == "mcp" and environment.tools == ("calculate", "answer")
    assert environment.split_sizes() == {"train": 320, "test": 80}
    test = environment.scenarios("test")
    assert {s.difficulty: sum(t.difficulty == s.difficulty for t in test) for s in test} == {
        "d1": 20,
        "d2": 20,
        "d3": 20,
        "d4": 20,
    }
    train_ids = {s.id for s in environment.scenarios("train")}
    assert not train_ids & {s.id for s in test}


def test_each_problem_is_solved_by_its_two_steps_and_needs_the_first_result() -> None:
    for scenario_id, form, problem in calculator.problems():
        first, second = problem.steps()
        carried = calculator.apply(first.a, first.op, first.b)
        assert carried in (second.a, second.b), scenario_id
        assert problem.answer() == calculator.apply(second.a, second.op, second.b) >= 0
        # The statement's own arithmetic (Python's precedence) agrees with the plan.
        if form != "d2":
            assert eval(calculator.text(problem, form)) == problem.answer(), scenario_id


def test_orders_and_statements() -> None:
    left = Problem(20, "+", 30, "*", 4, "left")
    right = Problem(20, "+", 30, "*", 4, "right")
    assert left.steps() == [Step(20, "+", 30), Step(50, "*", 4)] and left.answer() == 200
    assert right.steps() == [Step(30, "*", 4), Step(20, "+", 120)] and right.answer() == 140
    assert calculator.text(left, "d1") == "(20 + 30) * 4"
    assert calculator.text(left, "d2") == "Start with 20, add 30, then multiply by 4"
    assert calculator.text(right, "d3") == "20 + (30 * 4)"
    assert calculator.text(right, "d4") == "20 + 30 * 4"
    assert Problem(**left.setup_arguments()) == left  # type: ignore[arg-type]


def test_bad_operators_and_orders_are_refused() -> None:
    with pytest.raises(ValueError, match="operators"):
        Problem(1, "/", 2, "+", 3)
    with pytest.raises(ValueError, match="order"):
        Problem(1, "+", 2, "+", 3, "middle")
    with pytest.raises(ValueError, match="op must be"):
        calculator.apply(1, "^", 2)
