"""What a user's shell holds after `source <workdir>/fleet.env` (a real bash)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def sourced(env_file: Path) -> dict[str, str]:
    """The ARTFLEET_* variables a shell has after `source fleet.env`."""
    out = subprocess.run(
        ["bash", "-c", f"source {env_file} && env -0"],
        capture_output=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.decode()
    pairs = (item.partition("=") for item in out.split("\0") if item)
    return {k: v for k, _, v in pairs if k.startswith("ARTFLEET_")}
