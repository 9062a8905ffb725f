"""Repo tasks: the F2P/P2P count, the tests scorer's rule (terminal-agent table), code-fix data."""

from __future__ import annotations

import pytest

from artfleet.v1 import common_pb2 as pb
from artfleet_reward.scorers.process import pass_rate_score, process_reward, scored_tests
from artfleet_rollout.environments import get_environment
from artfleet_rollout.environments.code_fix import parse_code_fix
from artfleet_rollout.environments.repo_task import RepoTask, case_key
from artfleet_rollout.environments.shell_tasks import ScenarioDataError
from artfleet_rollout.repo_episode import grouped_summary

TASK = RepoTask(
    problem_statement="x",
    fail_to_pass=("tests/test_a.py::test_fix", "tests/test_a.py::TestK::test_param[1-2]"),
    pass_to_pass=("tests/test_a.py::test_keep", "tests/test_b.py::test_other"),
)


def test_node_ids_and_junit_names_meet() -> None:
    assert case_key("tests/test_a.py::TestK::test_x") == case_key("tests.test_a.TestK::test_x")


def test_grouped_counts_and_missing_tests() -> None:
    cases = {
        "tests.test_a::test_fix": "passed",
        "tests.test_a.TestK::test_param[1-2]": "failed",
        "tests.test_a::test_keep": "passed",
        # tests/test_b.py::test_other did not run (say the module failed to import)
    }
    s = grouped_summary(TASK, cases)
    assert (s.f2p_passed, s.f2p_failed, s.p2p_passed, s.p2p_failed) == (1, 1, 1, 1)
    assert (s.passed, s.failed, s.total, s.grouped, s.resolved) == (2, 1, 3, True, False)
    everything = dict.fromkeys([*cases, "tests.test_b::test_other"], "passed")
    assert grouped_summary(TASK, everything).resolved


def test_r2e_names_without_module_match() -> None:
    task = RepoTask(problem_statement="x", fail_to_pass=("TestR.test_q", "test_plain"))
    cases = {"r2e_tests.test_1.TestR::test_q": "passed", "r2e_tests.test_1::test_plain": "passed"}
    assert grouped_summary(task, cases).resolved


def test_tests_scorer_follows_the_terminal_agent_table() -> None:
    resolved = pb.TestSummary(grouped=True, resolved=True, passed=4, total=4, f2p_passed=2)
    assert pass_rate_score(resolved, 1.0, 0.5) == 1.0
    # All tests that ran passed, but an F2P test never ran: not resolved, pass-rate reward.
    partial = pb.TestSummary(grouped=True, passed=3, total=3, f2p_passed=1, f2p_failed=1)
    assert pass_rate_score(partial, 1.0, 0.5) == pytest.approx(0.5)
    half = pb.TestSummary(grouped=True, passed=1, failed=1, total=2)
    scored = scored_tests(half, 1.0, 0.5)
    assert scored.value == pytest.approx(0.25)
    assert set(scored.metrics) >= {"f2p_passed", "f2p_failed", "p2p_passed", "p2p_failed"}
    assert process_reward(pb.Episode(tests=resolved)) == 1.0
    plain = pb.TestSummary(passed=2, total=2)  # not a repo task: unchanged behaviour
    assert pass_rate_score(plain, 1.0, 0.5) == 1.0 and scored_tests(plain, 1.0, 0.5).metrics == {}


def test_code_fix_environment() -> None:
    env = get_environment("code-fix")
    sizes = env.split_sizes()
    assert sizes["train"] >= 20 and sizes["test"] >= 5
    difficulties = {s.difficulty for s in env.scenarios()}
    assert difficulties == {"easy", "medium", "hard"}
    for scenario in env.scenarios():
        task = scenario.repo
        assert task is not None and task.reference_fix.startswith("diff --git")
        assert not any(path.startswith("tests/") for path in scenario.files)  # tests hidden
        assert task.reference_fix not in repr(scenario)
        assert set(task.fail_to_pass).isdisjoint(task.pass_to_pass)


def test_code_fix_data_errors_name_the_bug() -> None:
    data = {
        "projects": {
            "p": {
                "files": {"m.py": "x = 1\n"},
                "tests": {"tests/test_m.py": "def test_x():\n    pass\n"},
                "bugs": [
                    {
                        "id": "p-bug",
                        "split": "train",
                        "difficulty": "easy",
                        "bug_type": "off-by-one",
                        "file": "m.py",
                        "find": "y = 1",
                        "replace": "y = 2",
                        "statement": "s",
                        "f2p": ["test_x"],
                    }
                ],
            }
        }
    }
    with pytest.raises(ScenarioDataError, match=r"p\.bugs\[p-bug\]\.find"):
        parse_code_fix(data)
