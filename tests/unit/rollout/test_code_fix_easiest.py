"""The easiest code-fix tasks name the file, the line and the one token to change, and the
sed command that makes it; that edit alone is the reference fix. Repo tasks are shown a
demonstrated sed fix, shell tasks keep theirs."""

from __future__ import annotations

import re

import pytest

from artfleet_rollout.agents.terminal import build_initial_messages
from artfleet_rollout.environments import get_environment
from artfleet_rollout.environments.code_fix import parse_code_fix
from artfleet_rollout.environments.shell_tasks import ScenarioDataError

NAMED = re.compile(r"In (\S+) line (\d+), `([^`]+)` must be `([^`]+)`\.")


def apply_sed(text: str, line: int, old: str, new: str) -> str:
    lines = text.split("\n")
    assert old in lines[line - 1], f"line {line} has no {old!r}: {lines[line - 1]!r}"
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return "\n".join(lines)


def test_each_named_line_fix_is_the_reference_fix() -> None:
    env = get_environment("code-fix")
    easiest = []
    for scenario in env.scenarios("train") + env.scenarios("test"):
        match = NAMED.search(scenario.repo.problem_statement)  # type: ignore[union-attr]
        if match is None:
            continue
        path, line, old, new = match[1], int(match[2]), match[3], match[4]
        fixed = apply_sed(scenario.files[path], line, old, new)
        sed = f"The fix: sed -i '{line}s/{old}/{new}/' {path}"
        assert sed in scenario.repo.problem_statement  # type: ignore[union-attr]
        patch = scenario.repo.reference_fix  # type: ignore[union-attr]
        assert f"-{scenario.files[path].split(chr(10))[line - 1]}" in patch
        assert f"+{fixed.split(chr(10))[line - 1]}" in patch
        assert scenario.difficulty == "easy"
        easiest.append((scenario.split, scenario.id))
    assert len(easiest) >= 5
    assert {split for split, _ in easiest} == {"train", "test"}


def _data(statement: str, find: str) -> dict[str, object]:
    bug = {
        "id": "b",
        "split": "train",
        "difficulty": "easy",
        "bug_type": "wrong-constant",
        "file": "m.py",
        "find": find,
        "replace": "X = 2",
        "statement": statement,
        "f2p": ["test_x"],
    }
    files = {"m.py": "'''m'''\nX = 1\n"}
    tests = {"tests/test_m.py": "from m import X\n\n\ndef test_x():\n    assert X == 1\n"}
    return {"projects": {"p": {"files": files, "tests": tests, "bugs": [bug]}}}


def test_the_line_placeholder_is_the_bug_line() -> None:
    env = parse_code_fix(_data("In m.py line {line}, `2` must be `1`.", "X = 1"))
    assert env.scenarios("train")[0].repo.problem_statement.endswith("line 2, `2` must be `1`.")  # type: ignore[union-attr]
    with pytest.raises(ScenarioDataError, match="one-line bug"):
        parse_code_fix(_data("line {line}", "'''m'''\nX = 1"))


def test_repo_tasks_are_shown_a_sed_fix() -> None:
    repo_task = get_environment("code-fix").scenarios("train")[0]
    shell_task = get_environment("shell-tasks").scenarios("train")[0]
    assert "sed -i '4s/-/+/' calc/sums.py" in str(build_initial_messages(repo_task))
    shell = str(build_initial_messages(shell_task))
    assert "echo draft > notes.txt" in shell and "sed -i" not in shell
