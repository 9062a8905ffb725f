"""Every `code-fix` task, on both sandbox backends: its F2P tests fail on the buggy project
and pass after its reference fix (applied with `git apply`), and its P2P tests pass both
times. The hidden tests are placed and counted by the rollout's own repo-task code."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from sandbox_docker_kit import BackendFactory

from artfleet.v1 import common_pb2 as pb
from artfleet_rollout.environments import Scenario, get_environment
from artfleet_rollout.ports import SuiteRun
from artfleet_rollout.repo_episode import finish_repo_task
from artfleet_sandbox.backend import (
    ExecOutcome,
    ExecSpec,
    FileSpec,
    SandboxBackend,
    SessionSpec,
)
from artfleet_sandbox.local_backend import LocalBackend, LocalConfig

BARE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # no host python/pytest beyond the system's


class BackendWorkspace:
    """The rollout's Workspace port over a sandbox backend, in process (no gRPC here)."""

    def __init__(self, backend: SandboxBackend, session_id: str) -> None:
        self.backend, self.id = backend, session_id

    async def exec(self, command: str, *, timeout_s: float) -> ExecOutcome:
        spec = ExecSpec(command, timeout_s, 64 * 1024, mode="stateless")
        return await self.backend.exec(self.id, spec)

    async def write_files(self, files: Mapping[str, str | bytes]) -> None:
        specs = [FileSpec(p, c.encode() if isinstance(c, str) else c) for p, c in files.items()]
        await self.backend.write_files(self.id, specs)

    async def read_file(self, path: str, *, max_bytes: int = 0) -> bytes:
        return (await self.backend.read_file(self.id, path, max_bytes or 1 << 20))[0]

    async def run_tests(self, command: str = "", *, timeout_s: float) -> SuiteRun:
        r = await self.backend.run_tests(self.id, command, timeout_s)
        cases = {c.name: c.outcome for c in r.tests}
        passed, failed = r.count("passed"), r.count("failed")
        return SuiteRun(
            passed, failed, r.count("errored"), r.total, r.exit_code, r.timed_out, r.output, cases
        )

    async def check(self, command: str, *, timeout_s: float) -> bool:
        return (await self.exec(command, timeout_s=timeout_s)).exit_code == 0

    async def close(self) -> None:
        await self.backend.close_session(self.id)


async def _prove(backend: SandboxBackend, scenario: Scenario) -> tuple[list[str], float]:
    """Problems with one task (empty = proven) and the seconds its two test runs took."""
    task = scenario.repo
    assert task is not None
    files = [FileSpec(p, c.encode()) for p, c in scenario.files.items()]
    info = await backend.create_session(SessionSpec(files=files, job_id="code-fix-proof"))
    workspace = BackendWorkspace(backend, info.session_id)
    problems: list[str] = []
    try:
        before = pb.Episode()
        await finish_repo_task(workspace, task, before, timeout_s=120)
        t = before.tests
        if t.f2p_passed or t.p2p_failed or t.resolved:
            problems.append(f"before the fix: {t}")
        await workspace.write_files({"fix.patch": task.reference_fix})
        applied = await workspace.exec("git apply fix.patch && rm fix.patch", timeout_s=60)
        if applied.exit_code != 0:
            problems.append(f"git apply: {applied.stderr.decode(errors='replace')}")
        after = pb.Episode()
        await finish_repo_task(workspace, task, after, timeout_s=120)
        if not after.tests.resolved or after.tests.total != len(task.hidden_tests()):
            problems.append(f"after the fix: {after.tests}")
        return [f"{scenario.id}: {p}" for p in problems], before.tests_seconds + after.tests_seconds
    finally:
        await workspace.close()


async def _prove_all(backend: SandboxBackend, concurrency: int) -> list[float]:
    scenarios = get_environment("code-fix").scenarios()
    assert len(scenarios) >= 30
    gate = asyncio.Semaphore(concurrency)

    async def one(scenario: Scenario) -> tuple[list[str], float]:
        async with gate:
            return await _prove(backend, scenario)

    results = await asyncio.gather(*(one(s) for s in scenarios))
    problems = [p for found, _ in results for p in found]
    assert not problems, "\n".join(problems)
    return [seconds for _, seconds in results]


def _report(backend: str, seconds: Sequence[float], wall: float) -> None:
    per_run = sum(seconds) / (2 * len(seconds))
    print(f"code_fix_{backend}_tasks={len(seconds)} test_run_s={per_run:.2f} wall_s={wall:.1f}")


async def test_every_code_fix_task_on_the_local_backend(shared_dir: Path) -> None:
    config = LocalConfig(path=BARE_PATH, cache_dir=str(shared_dir), reap_interval_s=3600)
    started = time.monotonic()
    async with LocalBackend(config) as backend:
        seconds = await _prove_all(backend, concurrency=2)
    _report("local", seconds, time.monotonic() - started)


@pytest.mark.slow
async def test_every_code_fix_task_on_the_docker_backend(docker_backend: BackendFactory) -> None:
    started = time.monotonic()
    async with docker_backend(pool_size=2) as backend:
        seconds = await _prove_all(backend, concurrency=2)
    _report("docker", seconds, time.monotonic() - started)
