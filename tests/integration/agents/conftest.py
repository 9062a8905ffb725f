"""The 2048 MCP server as users run it: the `artfleet-mcp-2048` console script on PATH."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_2048_script import write_mcp_2048_script


@pytest.fixture
def mcp_2048_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    script = write_mcp_2048_script(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    yield script
