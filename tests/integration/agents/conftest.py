"""The 2048 MCP server as users run it: the `artfleet-mcp-2048` console script on PATH.

A checkout that is not pip-installed has no such script, so the fixture writes one into a
temporary bin directory (the same module entry point the installed script runs) and puts
it first on PATH; the MCP SDK passes PATH, and only a few other variables, to servers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def mcp_2048_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "artfleet-mcp-2048"
    paths = os.pathsep.join(
        str(ROOT / p) for p in ("src", "services/rollout", "services/reward", "tests/support")
    )
    script.write_text(
        f'#!/bin/sh\nPYTHONPATH={paths} exec {sys.executable} -m artfleet_rollout.mcp_2048 "$@"\n'
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    yield script
