"""The `artfleet-mcp-2048` console script for a checkout that is not pip-installed.

Written into a temporary bin directory (the same module entry point the installed script
runs) and put first on PATH; the MCP SDK passes PATH, and only a few other variables, to
the servers it starts, so the script carries the checkout's PYTHONPATH itself.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from repo_paths import ROOT


def write_mcp_2048_script(bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "artfleet-mcp-2048"
    paths = os.pathsep.join(str(ROOT / p) for p in ("src", "services/rollout"))
    module = "artfleet_rollout.bundled.mcp_2048"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={paths} exec {sys.executable} -m {module} "$@"\n')
    script.chmod(0o755)
    return script
