"""Virtualenvs of the clients that talk to the fleet the way our users run them (the
`tinker` SDK, tinker-cookbook, ART's Tinker backends): each its own environment, made
once per machine from PyPI and reused (their pins conflict with each other and with ours)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(os.environ.get("ARTFLEET_CLIENT_VENVS", "~/.cache/artfleet/venvs")).expanduser()


def client_venv(name: str, requirements: list[str]) -> Path:
    """The python of the virtualenv `name` holding `requirements` (made if missing)."""
    folder = ROOT / name
    python = folder / "bin" / "python"
    marker = folder / ".artfleet-requirements"
    wanted = "\n".join(requirements)
    if python.exists() and marker.is_file() and marker.read_text() == wanted:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            *requirements,
        ],
        check=True,
    )
    marker.write_text(wanted)
    return python
