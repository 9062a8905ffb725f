"""Failed episodes as they travel (artfleet.contracts.failures): counted by type, a group
that could not run counting for each of its episodes, and said on one line."""

from __future__ import annotations

from collections import Counter

from artfleet.contracts import failures
from artfleet.v1 import common_pb2 as pb


def test_failures_are_counted_by_type_a_whole_groups_for_each_of_its_episodes() -> None:
    records = [
        pb.RolloutException(type="AssertionError"),
        pb.RolloutException(type="KeyError", message="answer"),
        pb.RolloutException(type="AssertionError"),
        pb.RolloutException(type="InvalidArgument", episodes=4),  # the group never ran
        pb.RolloutException(),
    ]
    counts = failures.count(records)
    assert counts == Counter(AssertionError=2, KeyError=1, InvalidArgument=4, **{"(unknown)": 1})
    assert failures.breakdown(counts) == (
        "4 InvalidArgument, 2 AssertionError, 1 (unknown), 1 KeyError"
    )


def test_a_failure_is_one_line_with_where_the_users_code_raised_it_innermost_first() -> None:
    bare = pb.RolloutException(
        type="AssertionError",
        frames=["quiz/rollout.py:40 in rollout", "quiz/checks.py:12 in check_answer"],
    )
    assert failures.describe(bare) == (
        "AssertionError at quiz/checks.py:12 in check_answer < quiz/rollout.py:40 in rollout"
    )
    long = pb.RolloutException(type="ValueError", message="line one\n  line two " + "x" * 900)
    text = failures.describe(long)
    assert text.startswith("ValueError: line one line two x") and "\n" not in text
    assert len(text) == len("ValueError: ") + failures.MESSAGE_CHARS
