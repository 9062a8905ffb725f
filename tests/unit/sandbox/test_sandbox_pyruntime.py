"""The local backend's test runtime: RunTests works where the host has no `python` and no
pytest on the sandbox PATH (stock Debian after the README install)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from artfleet_sandbox.backend import ExecSpec, FileSpec, SessionSpec
from artfleet_sandbox.local_backend import LocalBackend, LocalConfig
from artfleet_sandbox.pyruntime import prepare_runtime

# Only the system dirs: whatever python/pytest the host has there must not be what runs.
BARE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
TESTS = FileSpec(
    "test_calc.py", b"def test_ok():\n    assert 1 + 1 == 2\n\ndef test_bad():\n    assert 0\n"
)


def test_runtime_is_built_once_and_reused(tmp_path: Path) -> None:
    first = prepare_runtime(str(tmp_path))
    marker = Path(first.root) / "bin" / "pytest"
    stamp = marker.stat().st_mtime_ns
    second = prepare_runtime(str(tmp_path))
    assert second.root == first.root and marker.stat().st_mtime_ns == stamp
    assert "pytest" in first.packages and "pluggy" in first.packages
    assert os.path.islink(Path(first.root) / "bin" / "python")


@pytest.mark.parametrize("command", ["", "pytest -q --junitxml={junitxml}"])
async def test_run_tests_without_a_host_python(
    config_factory: Callable[..., LocalConfig],
    isolation_mode: str,
    tmp_path: Path,
    command: str,
) -> None:
    # A root server drops sessions to an unprivileged user, which must reach the cache dir
    # (pytest's tmp_path sits under a 0700 directory).
    tmp_path = Path(tempfile.mkdtemp(prefix="artfleet-runtime-", dir="/var/tmp"))
    tmp_path.chmod(0o755)
    config = config_factory(use_bwrap=isolation_mode, path=BARE_PATH, cache_dir=str(tmp_path))
    try:
        await _run_tests_without_a_host_python(config, command, tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


async def _run_tests_without_a_host_python(
    config: LocalConfig, command: str, tmp_path: Path
) -> None:
    async with LocalBackend(config) as backend:
        info = await backend.create_session(SessionSpec(files=[TESTS]))
        assert "tests: python" in info.isolation and "pytest" in info.isolation
        report = await backend.run_tests(info.session_id, command, 60)
        assert report.count("passed") == 1 and report.count("failed") == 1, report.output
        which = await backend.exec(
            info.session_id,
            ExecSpec("command -v python pytest", 10, 4096, mode="stateless"),
        )
        assert which.stdout.decode().count(str(tmp_path)) == 2


async def test_runtime_off_is_said_in_isolation(
    config_factory: Callable[..., LocalConfig], tmp_path: Path
) -> None:
    config = config_factory(use_bwrap="never", test_runtime=False, cache_dir=str(tmp_path))
    async with LocalBackend(config) as backend:
        info = await backend.create_session(SessionSpec())
        assert "host's python only" in info.isolation
