"""An installed plugin package for tests: a module and its dist-info (name, version, entry
points) on sys.path, as `pip install` leaves them, so `importlib.metadata` finds its entry
points and their distribution."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import ROOT


def install_plugin(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    module: str,
    source: str,
    entry_points: str,
    *,
    version: str = "0.1",
) -> str:
    """Writes `module`.py and its dist-info under `root`; returns the distribution's name."""
    (root / f"{module}.py").write_text(source)
    info = root / f"{module}-{version}.dist-info"
    info.mkdir()
    name = module.replace("_", "-")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)
    monkeypatch.syspath_prepend(str(root))
    # Another test may have installed (and imported) a module of that name elsewhere.
    monkeypatch.delitem(sys.modules, module, raising=False)
    return name


EXAMPLES = ROOT / "examples"
EXAMPLE_PACKAGES = ("guess-number", "sandbox-coding")


def pip_install_examples(target: Path) -> Path:
    """`pip install`s the example plugin packages (examples/) into `target`, as a user
    installs theirs into the fleet's environment; put `target` on the path to use them.
    Each is built from a copy, so the build leaves nothing in the source tree."""
    sources = target.parent / f"{target.name}-sources"
    for name in EXAMPLE_PACKAGES:
        shutil.copytree(EXAMPLES / name, sources / name)
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--target", str(target)),
            *(str(sources / name) for name in EXAMPLE_PACKAGES),
        ],
        check=True,
        capture_output=True,
    )
    return target


def pip_install_package(
    target: Path, module: str, source: str, entry_points: str, *, version: str = "0.1"
) -> str:
    """`pip install`s a one-module package (its `pyproject.toml` declaring `entry_points`,
    the TOML tables of its entry point groups) into `target`, as a user installs a plugin;
    put `target` on the path to use it. Returns the distribution's name."""
    name = module.replace("_", "-")
    package = target.parent / f"{target.name}-{name}"
    package.mkdir(parents=True)
    (package / f"{module}.py").write_text(source)
    (package / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\ndependencies = []\n'
        f'[tool.setuptools]\npy-modules = ["{module}"]\n{entry_points}'
    )
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--target", str(target), str(package)),
        ],
        check=True,
        capture_output=True,
    )
    return name
