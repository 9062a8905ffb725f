"""`code-fix`: repo tasks built from compact definitions (`code_fix.yaml`).

A project is a few modules and a hidden test file; a bug is one `find` -> `replace` edit
in one module. Each bug becomes one task: the buggy project (tests left out) is the
workspace, the bug's `f2p` tests fail until it is fixed, every other test of the project
is pass-to-pass, and the reference fix is the unified diff back to the correct code.
Malformed data fails at load, naming the project, bug and field.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from .base import SPLITS, Environment, Scenario
from .repo_task import BUG_TYPES, RepoTask
from .shell_tasks import ScenarioDataError, bundled_yaml

NAME = "code-fix"
DATA_FILE = "code_fix.yaml"

_TEST_DEF = re.compile(r"^def (test_\w+)\(", re.MULTILINE)
_BUG_KEYS = {"id", "split", "difficulty", "bug_type", "file", "find", "replace", "statement", "f2p"}
_DIFFICULTIES = ("easy", "medium", "hard")

INSTRUCTION = (
    "{statement}\n\nThe Python project is in the current directory. Find and fix the bug "
    "in its source code. Hidden tests (run with pytest) will check your fix; do not add "
    "tests."
)


def unified_diff(path: str, before: str, after: str) -> str:
    """A `git apply`-able patch for one file."""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def bug_line(correct: str, find: str) -> int:
    """The 1-based line where the injected bug starts (the buggy file is the same up to
    there); statements of the easiest tasks name it: `{line}`."""
    return correct[: correct.index(find)].count("\n") + 1


def _bug_task(project: str, raw: Any, files: dict[str, str], tests: dict[str, str]) -> Scenario:
    where = f"{DATA_FILE}: {project}.bugs[{raw.get('id', '?') if isinstance(raw, dict) else '?'}]"
    if not isinstance(raw, dict) or set(raw) != _BUG_KEYS:
        raise ScenarioDataError(f"{where}: needs exactly the keys {sorted(_BUG_KEYS)}")
    if raw["split"] not in SPLITS or raw["difficulty"] not in _DIFFICULTIES:
        raise ScenarioDataError(f"{where}: bad split or difficulty")
    if raw["bug_type"] not in BUG_TYPES:
        raise ScenarioDataError(f"{where}.bug_type: one of {', '.join(BUG_TYPES)}")
    path, find, replace = raw["file"], raw["find"], raw["replace"]
    if files.get(path, "").count(find) != 1:
        raise ScenarioDataError(f"{where}.find: must occur exactly once in {path}")
    correct = files[path]
    buggy = correct.replace(find, replace)
    statement = " ".join(str(raw["statement"]).split())
    if "{line}" in statement:
        if "\n" in find or "\n" in replace:
            raise ScenarioDataError(f"{where}.statement: {{line}} needs a one-line bug")
        statement = statement.replace("{line}", str(bug_line(correct, find)))
    names = {
        name: test_file for test_file, text in tests.items() for name in _TEST_DEF.findall(text)
    }
    unknown = [t for t in raw["f2p"] if t not in names]
    if unknown or not raw["f2p"]:
        raise ScenarioDataError(f"{where}.f2p: unknown or no tests {unknown}")
    f2p = tuple(f"{names[t]}::{t}" for t in raw["f2p"])
    p2p = tuple(f"{f}::{t}" for t, f in names.items() if t not in raw["f2p"])
    task = RepoTask(
        problem_statement=statement,
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        test_files=dict(tests),
        reference_fix=unified_diff(path, buggy, correct),
        bug_types=(raw["bug_type"],),
        difficulty=raw["difficulty"],
        source=NAME,
    )
    return Scenario(
        id=raw["id"],
        split=raw["split"],
        title=statement[:80],
        instruction=INSTRUCTION.format(statement=statement),
        files={**files, path: buggy},
        difficulty=raw["difficulty"],
        repo=task,
    )


def parse_code_fix(data: Any) -> Environment:
    if not isinstance(data, dict) or not isinstance(data.get("projects"), dict):
        raise ScenarioDataError(f"{DATA_FILE}: expected a mapping with `projects`")
    scenarios: list[Scenario] = []
    for project, spec in data["projects"].items():
        if not isinstance(spec, dict) or not all(
            isinstance(spec.get(k), dict) for k in ("files", "tests")
        ):
            raise ScenarioDataError(f"{DATA_FILE}: {project}: needs `files` and `tests` maps")
        for raw in spec.get("bugs") or []:
            scenarios.append(_bug_task(project, raw, spec["files"], spec["tests"]))
    return Environment(
        name=str(data.get("name") or NAME),
        description=" ".join(str(data.get("description") or "").split()),
        scenarios=scenarios,
    )


def load_code_fix(path: Path | None = None) -> Environment:
    return parse_code_fix(bundled_yaml(DATA_FILE, path))
