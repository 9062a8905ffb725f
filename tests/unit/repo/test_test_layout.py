"""Tests mirror the product tree: a unit test sits under the kernel part or service it checks
(or `repo/`, `harness/` for the checkout and the test tooling), an integration test under its
service or topic; none at the roots, where a newcomer could not tell what it covers."""

from __future__ import annotations

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
