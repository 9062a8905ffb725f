"""The local backend's test runtime: a Python with pytest that every session can run.

A stock Debian host has `python3` but neither a `python` command nor pytest, and what a
host happens to have must not decide whether RunTests works. So the local backend
prepares, once per cache dir, a small virtual environment made from the service's own
interpreter, with pytest and its dependencies copied from the service's own environment
(no network, no pip). Its `bin/` (`python`, `python3`, `pytest`) goes first on every
session's PATH. The dir name carries the interpreter and package versions, so an upgrade
prepares a new one beside the old, and replicas sharing the cache dir build it once
(the first rename wins).
"""

from __future__ import annotations

import compileall
import hashlib
import importlib.metadata as md
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

RUNTIME_PACKAGES = ("pytest",)
_READY = ".artfleet-ready"
_PYTEST_SCRIPT = """#!{python}
import sys
import pytest
sys.exit(pytest.main())
"""


def default_cache_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"artfleet-cache-{os.getuid()}")


@dataclass(frozen=True)
class PyRuntime:
    root: str
    python_version: str
    packages: dict[str, str]  # name -> version, as copied
    base_prefix: str = sys.base_prefix  # the interpreter's installation it runs on

    @property
    def bin_dir(self) -> str:
        return os.path.join(self.root, "bin")

    def describe(self) -> str:
        pkgs = ", ".join(f"{name} {version}" for name, version in sorted(self.packages.items()))
        return f"python {self.python_version} with {pkgs} (runtime {self.root})"


def _closure(names: tuple[str, ...]) -> dict[str, md.Distribution]:
    """The distributions `names` need at run time, by normalized name (extras left out)."""
    from packaging.requirements import Requirement  # pytest's own dependency

    found: dict[str, md.Distribution] = {}
    queue = list(names)
    while queue:
        name = queue.pop().lower().replace("_", "-")
        if name in found:
            continue
        found[name] = dist = md.distribution(name)
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                queue.append(req.name)
    return found


def _copy_dist(dist: md.Distribution, site: Path) -> None:
    for rel in dist.files or []:
        if rel.parts and rel.parts[0] == "..":  # console scripts: we write our own
            continue
        source = Path(str(dist.locate_file(rel)))
        if source.suffix == ".pyc" or not source.is_file():
            continue
        target = site / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _site_packages(root: Path) -> Path:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return root / "lib" / version / "site-packages"


def _build(root: Path, dists: dict[str, md.Distribution]) -> None:
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(root)
    site = _site_packages(root)
    for dist in dists.values():
        _copy_dist(dist, site)
    # Sessions see the runtime read-only (and test commands may forbid bytecode writes):
    # compiled once here, pytest starts in a fraction of a second every time.
    compileall.compile_dir(str(site), quiet=1, workers=1)
    script = root / "bin" / "pytest"
    # Through PATH, not an absolute path: the tree is renamed into place after this.
    script.write_text(_PYTEST_SCRIPT.format(python="/usr/bin/env python"))
    script.chmod(0o755)
    bindir = root / "bin"
    if not (bindir / "python").exists():
        (bindir / "python").symlink_to("python3")


def _probe(root: Path) -> None:
    result = subprocess.run(
        [str(root / "bin" / "python"), "-c", "import pytest"],
        capture_output=True,
        timeout=60,
        env={"PATH": str(root / "bin"), "LANG": "C.UTF-8"},
    )
    if result.returncode != 0:
        raise RuntimeError(result.stderr.decode(errors="replace")[-2000:])


def prepare_runtime(cache_dir: str, packages: tuple[str, ...] = RUNTIME_PACKAGES) -> PyRuntime:
    """The runtime under `cache_dir`, built on first use; raises RuntimeError if impossible."""
    try:
        dists = _closure(packages)
    except md.PackageNotFoundError as exc:
        raise RuntimeError(
            f"{exc.name} is not installed in the sandbox service's environment "
            "(pip install 'artfleet[sandbox]')"
        ) from None
    versions = {name: dist.version for name, dist in dists.items()}
    python_version = ".".join(map(str, sys.version_info[:3]))
    key = hashlib.sha256(repr((sys.base_prefix, python_version, sorted(versions.items()))).encode())
    target = Path(cache_dir) / f"pyruntime-{python_version}-{key.hexdigest()[:12]}"
    if not (target / _READY).exists():
        os.makedirs(cache_dir, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".pyruntime-", dir=cache_dir))
        try:
            _build(staging, dists)
            _probe(staging)
            (staging / _READY).write_text(python_version)
            try:
                os.rename(staging, target)
            except OSError:  # another replica won the race, or a stale half-built dir
                if not (target / _READY).exists():
                    shutil.rmtree(target, ignore_errors=True)
                    os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        log.info("prepared the sandbox test runtime at %s", target)
    # Sessions may run as an unprivileged user (a root server drops them): they read and
    # execute the runtime, never write it. mkdtemp made it 0700.
    os.chmod(target, 0o755)
    return PyRuntime(str(target), python_version, versions)
