"""The end of a repo-task episode: put the hidden tests in place, run them, and count the
fail-to-pass (F2P) and pass-to-pass (P2P) groups into `Episode.tests`.

Called once after the agent loop, on the same workspace; the agent never saw these files.
A hidden test that did not run (not collected, the run crashed or timed out) counts as
failed in its group; the pass rate covers the tests that ran, as the reward table says.
"""

from __future__ import annotations

import base64
import shlex
import time
from collections.abc import Mapping
from typing import Protocol

from artfleet.v1 import common_pb2 as pb
from artfleet_rollout import metrics
from artfleet_rollout.environments.repo_task import RepoTask, case_key
from artfleet_rollout.ports import SuiteRun, Workspace

_PASSED = ("passed",)


async def place_tests(workspace: Workspace, task: RepoTask, *, timeout_s: float) -> None:
    """Writes the hidden test files (and applies a SWE-bench `test_patch`)."""
    relative = {p: c for p, c in task.test_files.items() if not task.repo_dir}
    if relative:
        await workspace.write_files(relative)
    elif task.test_files:  # the repo lives at an absolute path in the task's image
        for path, content in task.test_files.items():
            target = shlex.quote(task.test_path(path))
            data = base64.b64encode(content.encode()).decode()
            await workspace.exec(
                f"mkdir -p $(dirname {target}) && echo {data} | base64 -d > {target}",
                timeout_s=timeout_s,
            )
    if task.test_patch:
        await workspace.write_files({".artfleet/test.patch": task.test_patch})
        where = f"cd {shlex.quote(task.repo_dir)} && " if task.repo_dir else ""
        patch = "$OLDPWD/.artfleet/test.patch" if task.repo_dir else ".artfleet/test.patch"
        await workspace.exec(
            f"{where}git apply --reject {patch} || patch -p1 < {patch}", timeout_s=timeout_s
        )


def _lookup(outcomes: Mapping[str, str], test: str) -> str | None:
    """The outcome of `test`; R2E-Gym names tests without their module (`Class.test`)."""
    key = case_key(test)
    found = outcomes.get(key)
    if found is None:
        suffix = "." + key
        found = next((o for k, o in outcomes.items() if k.endswith(suffix)), None)
    return found


def grouped_summary(task: RepoTask, cases: Mapping[str, str]) -> pb.TestSummary:
    """F2P/P2P counts from per-test outcomes keyed by JUnit name."""
    outcomes = {case_key(name): outcome for name, outcome in cases.items()}
    summary = pb.TestSummary(grouped=True)
    ran = passed = 0
    for group, ids in (("f2p", task.fail_to_pass), ("p2p", task.pass_to_pass)):
        ok = 0
        for test in ids:
            outcome = _lookup(outcomes, test)
            ran += outcome is not None and outcome != "skipped"
            ok += outcome in _PASSED
        passed += ok
        setattr(summary, f"{group}_passed", ok)
        setattr(summary, f"{group}_failed", len(ids) - ok)
    summary.passed, summary.total = passed, ran
    summary.failed = ran - passed
    summary.resolved = bool(task.fail_to_pass) and passed == len(task.hidden_tests())
    return summary


class Counted(Protocol):
    """A test run's counts (ports.SuiteRun, the plugin API's TestRun)."""

    @property
    def passed(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def errored(self) -> int: ...
    @property
    def total(self) -> int: ...
    @property
    def exit_code(self) -> int: ...


def suite_summary(run: Counted) -> pb.TestSummary:
    """A run's own counts; resolved = it ran tests, all passed, and it exited 0."""
    summary = pb.TestSummary(
        passed=run.passed, failed=run.failed, errored=run.errored, total=run.total
    )
    summary.resolved = run.total > 0 and run.passed == run.total and run.exit_code == 0
    return summary


def _observe(summary: pb.TestSummary, seconds: float) -> None:
    metrics.REPO_TASKS.labels(str(summary.resolved).lower()).inc()
    metrics.REPO_TEST_SECONDS.observe(seconds)
    for group in ("f2p", "p2p"):
        for outcome in ("passed", "failed"):
            count = getattr(summary, f"{group}_{outcome}")
            if count:
                metrics.REPO_TESTS.labels(group, outcome).inc(count)


def repo_source(task: RepoTask | None, image: str) -> dict[str, str]:
    """WorkspaceSpec fields for a repo the sandbox seeds from its cache dir: a task whose
    image already holds the repo needs none."""
    if task is None or image or not task.cached_repo:
        return {}
    return {"repo_path": task.cached_repo, "repo_commit": task.commit}


def repo_metrics(summary: pb.TestSummary) -> dict[str, float]:
    return {
        "f2p_passed": summary.f2p_passed,
        "f2p_failed": summary.f2p_failed,
        "p2p_passed": summary.p2p_passed,
        "p2p_failed": summary.p2p_failed,
        "resolved": float(summary.resolved),
    }


async def finish_repo_task(
    workspace: Workspace, task: RepoTask, episode: pb.Episode, *, timeout_s: float
) -> dict[str, float]:
    """Places and runs the hidden tests; fills `episode.tests` and returns the metrics."""
    started = time.perf_counter()
    await place_tests(workspace, task, timeout_s=timeout_s)
    run: SuiteRun = await workspace.run_tests(
        task.test_command or task.default_test_command(), timeout_s=timeout_s
    )
    # Hidden tests: F2P/P2P groups; only a test command (SWE-SYNTH style): its own counts.
    summary = grouped_summary(task, run.cases) if task.hidden_tests() else suite_summary(run)
    episode.tests.CopyFrom(summary)
    episode.tests_seconds = time.perf_counter() - started
    episode.check_ran, episode.check_passed = True, summary.resolved
    _observe(summary, episode.tests_seconds)
    return {**repo_metrics(summary), "tests_seconds": episode.tests_seconds}
