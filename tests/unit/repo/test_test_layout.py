"""Tests mirror the product tree: a unit test sits under the kernel part or service it checks
(or `repo/`, `harness/` for the checkout and the test tooling), an integration test under its
service or topic; none at the roots, where a newcomer could not tell what it covers."""

from __future__ import annotations

import ast

from repo_paths import ROOT, TESTS

KERNEL_PARTS = {
    p.name for p in (ROOT / "src" / "artfleet").iterdir() if (p / "__init__.py").exists()
}
SERVICES = {p.name for p in (ROOT / "services").iterdir() if p.is_dir()}
UNIT_FOLDERS = (KERNEL_PARTS - {"v1"}) | SERVICES | {"repo", "harness"}


def _top_folders(kind: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for test in (TESTS / kind).rglob("test_*.py"):
        parts = test.relative_to(TESTS / kind).parts
        found.setdefault(parts[0] if len(parts) > 1 else "", []).append(str(test.relative_to(ROOT)))
    return found


def test_no_test_sits_at_a_root() -> None:
    assert "" not in _top_folders("unit"), _top_folders("unit").get("")
    assert "" not in _top_folders("integration"), _top_folders("integration").get("")


def test_unit_tests_sit_under_a_kernel_part_or_a_service() -> None:
    strays = {k: v for k, v in _top_folders("unit").items() if k not in UNIT_FOLDERS}
    assert not strays, f"unit test folders that name no kernel part or service: {strays}"


def test_test_module_names_are_unique() -> None:
    # pytest imports test modules by their base name: two alike would shadow each other
    names = [p.name for p in TESTS.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def _module_fixtures_on_tmp_path_factory() -> list[str]:
    found = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            scopes = [
                kw.value.value
                for dec in node.decorator_list
                if isinstance(dec, ast.Call)
                for kw in dec.keywords
                if kw.arg == "scope" and isinstance(kw.value, ast.Constant)
            ]
            takes = [a.arg for a in node.args.args]
            if "module" in scopes and "tmp_path_factory" in takes and node.name != "module_tmp":
                found.append(f"{path.relative_to(ROOT)}::{node.name}")
    return found


def test_module_fixtures_take_their_folders_from_module_tmp() -> None:
    # tmp_path_factory's folders stay to the session's end: a CI run's disk filled up with
    # the fleets and checkpoints of modules long done (docs/testing.md, "The disk")
    assert _module_fixtures_on_tmp_path_factory() == []
