"""Virtualenvs of the clients that talk to the fleet the way our users run them (the
`tinker` SDK, tinker-cookbook, ART's Tinker backends): each its own environment, made
once per machine from PyPI and reused (their pins conflict with each other and with ours).

torch comes from pip's find-links (the CPU wheel, as in the Makefile), so a client that
needs torch names `torch==2.13.0` among its requirements. A package whose declared
dependencies cannot be installed as declared (one that PyPI does not serve, or a torch pin
only a CUDA wheel satisfies) goes in `no_deps`: it is installed after `requirements`,
without its dependencies, which `requirements` then lists by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("ARTFLEET_CLIENT_VENVS", "~/.cache/artfleet/venvs")).expanduser()


def client_venv(name: str, requirements: list[str], no_deps: list[str] | None = None) -> Path:
    """The python of the virtualenv `name` holding `requirements` and, installed without
    their dependencies, `no_deps` (made if missing)."""
    folder = ROOT / name
    python = folder / "bin" / "python"
    marker = folder / ".artfleet-requirements"
    wanted = "\n".join(requirements + (["--no-deps", *no_deps] if no_deps else []))
    if python.exists() and marker.is_file() and marker.read_text() == wanted:
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *requirements], check=True)
    if no_deps:
        subprocess.run([*pip, "--no-deps", *no_deps], check=True)
    marker.write_text(wanted)
    return python


# tinker-cookbook's and ART's environments (torch included) take ~90 s and ~1.7 GB each to
# make: more than CI's budget holds, so their tests run where this is set (the `tinker`
# SDK's, ~30 s, always runs).
HEAVY_CLIENTS = pytest.mark.skipif(
    os.environ.get("ARTFLEET_CLIENT_TESTS") != "1",
    reason="builds a ~1.7 GB client environment: set ARTFLEET_CLIENT_TESTS=1",
)
