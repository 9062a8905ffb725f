"""The shared kernel (`src/artfleet`) has four parts and imports nothing above it: no
service package, not the CLI, not the API. Inside it, each part imports only the parts
below it, so a reader can take the contracts without the runtime, and the specs without
either service's code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from repo_paths import ROOT

KERNEL = ROOT / "src" / "artfleet"
PARTS = ("contracts", "specs", "runtime", "clients")
# What each part may import of the kernel (besides itself and the generated `v1`).
ALLOWED = {
    "contracts": set(),
    "specs": {"contracts"},
    "runtime": {"contracts"},
    "clients": {"contracts", "runtime", "specs"},
    "": set(PARTS),  # the package root: only its version
}
ABOVE = ("artfleet_",)  # every service package, the CLI (artfleet_cli) and the API


def _part(path: Path) -> str:
    rel = path.relative_to(KERNEL).parts
    return rel[0] if len(rel) > 1 and rel[0] in PARTS else ""


def _imports(path: Path) -> list[tuple[int, str]]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "artfleet":
                names += [(node.lineno, f"artfleet.{alias.name}") for alias in node.names]
            else:
                names.append((node.lineno, node.module))
    return names


def _modules() -> list[Path]:
    return sorted(p for p in KERNEL.rglob("*.py") if "v1" not in p.relative_to(KERNEL).parts)


def violations(path: Path) -> list[str]:
    """What `path` imports that its part may not: a package above the kernel, or a part
    of the kernel that is not below its own."""
    part, found = _part(path), []
    for line, name in _imports(path):
        where = f"{path.relative_to(KERNEL)}:{line} imports {name}"
        if name.startswith(ABOVE):
            found.append(where)
            continue
        pieces = name.split(".")
        if pieces[0] != "artfleet" or len(pieces) < 2 or pieces[1] in ("v1", "__version__"):
            continue
        if pieces[1] not in PARTS:
            found.append(f"{where} (no such part)")
        elif pieces[1] != part and pieces[1] not in ALLOWED[part]:
            found.append(where)
    return found


def test_the_kernel_is_only_its_four_parts() -> None:
    top = {p.name for p in KERNEL.iterdir() if not p.name.startswith((".", "__"))}
    assert top == {*PARTS, "v1", "py.typed"}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(KERNEL)))
def test_a_kernel_module_imports_only_what_is_below_it(path: Path) -> None:
    assert violations(path) == []


def test_the_check_finds_an_import_from_above_and_one_across(tmp_path: Path) -> None:
    """The checker itself fails where it should (a part reaching sideways or upwards)."""
    global KERNEL
    kernel, KERNEL = KERNEL, tmp_path
    try:
        (tmp_path / "runtime").mkdir()
        bad = tmp_path / "runtime" / "bad.py"
        bad.write_text(
            "from artfleet.specs.job import JobSpecModel\n"
            "import artfleet_rollout.worker\n"
            "from artfleet import clients\n"
            "from artfleet.contracts import errors\n"
            "from artfleet.v1 import common_pb2\n"
        )
        assert [v.split(" imports ")[1] for v in violations(bad)] == [
            "artfleet.specs.job",
            "artfleet_rollout.worker",
            "artfleet.clients",
        ]
    finally:
        KERNEL = kernel
