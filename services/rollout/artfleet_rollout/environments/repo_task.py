"""Repo tasks (SWE-bench, R2E-Gym, SWE-SYNTH, `code-fix`): fix a repository so that its
hidden tests pass.

Where the repository comes from, one of:
- files shipped with the task (`Scenario.files`, written into the workspace);
- a per-task image that already holds it (`Scenario.image`, the repo at `repo_dir`);
- a repository in the sandbox's cache dir at a commit (`cached_repo` + `commit`).

The agent works in the repo and never sees the hidden tests or the reference fix; after
its episode the hidden test files are put in place and the fail-to-pass (F2P) and
pass-to-pass (P2P) tests are run (`artfleet_rollout.repo_episode`).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

BUG_TYPES = (
    "logic-inversion",
    "off-by-one",
    "wrong-operator",
    "missing-edge-case",
    "wrong-default",
    "wrong-variable",
    "wrong-constant",
)


def case_key(name: str) -> str:
    """One spelling for a test id, from a pytest node id (`tests/test_a.py::T::test_x`)
    or from a JUnit name (`tests.test_a.T::test_x`): `tests.test_a.T.test_x`."""
    name = name.strip().replace(".py::", "::")
    return name.replace("/", ".").replace("::", ".")


@dataclass(frozen=True)
class RepoTask:
    problem_statement: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...] = ()
    # Hidden test files (repo-relative path -> content), written after the episode over
    # whatever the agent left there; kept out of repr with everything else hidden.
    test_files: dict[str, str] = field(default_factory=dict, repr=False)
    test_patch: str = field(default="", repr=False)  # SWE-bench: a diff adding the tests
    # Runs the tests, `{junitxml}` = the report path; "" = pytest on the files of the tests.
    test_command: str = ""
    # "" = the workspace itself; an absolute path where a per-task image holds the repo.
    repo_dir: str = ""
    # A repo under the sandbox's cache dir (the R2E-Gym training script's --cache-dir).
    cached_repo: str = ""
    commit: str = ""
    reference_fix: str = field(default="", repr=False)  # a patch; never shown to the agent
    bug_types: tuple[str, ...] = ()
    difficulty: str = ""
    source: str = ""  # "code-fix", "swebench", "r2e", "swesynth"

    def hidden_tests(self) -> tuple[str, ...]:
        return (*self.fail_to_pass, *self.pass_to_pass)

    def default_test_command(self) -> str:
        """pytest over the test files the F2P/P2P ids name (the whole suite if none do)."""
        files = sorted(
            {t.split("::", 1)[0] for t in self.hidden_tests() if "::" in t and ".py" in t}
        )
        targets = " ".join(files)
        # No bytecode of the repo's: an edit within the same second that keeps a module's
        # size (`<` -> `>`) would otherwise run the stale .pyc of an earlier run.
        command = (
            "find . -name __pycache__ -type d -prune -exec rm -rf {} + ; "
            "PYTHONDONTWRITEBYTECODE=1 python3 -m pytest -q -p no:cacheprovider "
            f"--junitxml={{junitxml}} {targets}"
        )
        if self.repo_dir:
            return f"cd {self.repo_dir} && {command.strip()}"
        return command.strip()

    def test_path(self, path: str) -> str:
        """Where a hidden test file goes: workspace-relative, or absolute in the image."""
        return posixpath.join(self.repo_dir, path) if self.repo_dir else path
