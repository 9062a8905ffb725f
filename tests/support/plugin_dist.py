"""An installed plugin package for tests: a module and its dist-info (name, version, entry
points) on sys.path, as `pip install` leaves them, so `importlib.metadata` finds its entry
points and their distribution."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


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
