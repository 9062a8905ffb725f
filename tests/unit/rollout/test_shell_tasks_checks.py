"""For EVERY bundled task: the check fails on the fresh workspace and passes after the
reference solution. Runs real `sh` in a temp dir (POSIX tools + python3, as the checks)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from artfleet_rollout.environments import Scenario, get_environment

SCENARIOS = get_environment("shell-tasks").scenarios()
# The sandbox gives commands a plain environment; so do we (and a fixed locale, although
# the data avoids locale-dependent orders).
_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": "/nonexistent"}


def _sh(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command], cwd=cwd, env=_ENV, capture_output=True, text=True, timeout=30
    )


def _workspace(scenario: Scenario, root: Path) -> Path:
    for rel, content in scenario.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
    return root


def test_there_are_enough_tasks() -> None:
    assert len(SCENARIOS) >= 40


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_check_fails_before_and_passes_after_solution(scenario: Scenario, tmp_path: Path) -> None:
    workspace = _workspace(scenario, tmp_path)
    before = _sh(scenario.check, workspace)
    assert before.returncode != 0, f"check passes on the untouched workspace: {scenario.id}"
    solved = _sh(scenario.solution, workspace)
    assert solved.returncode == 0, f"solution failed: {solved.stderr}"
    after = _sh(scenario.check, workspace)
    assert after.returncode == 0, f"check fails after the solution: {after.stderr}"
