"""The test tooling itself: the time per test area and its budgets (docs/testing.md), and
how the tests are spread over xdist workers (one scope per integration module, one for the
shared API fleet's folder, one per unit test; busiest areas first)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from area_times import WorkerSpan, area_of, area_table, read_budgets, worker_rows
from repo_paths import ROOT
from xdist_scopes import (
    SHARED_FLEET_MODULES,
    TORCH_FLEET,
    VLLM_FLEET_MODULES,
    VLLM_FLEETS,
    order_by_budget,
    scope_of,
)


def test_areas_are_integration_folders_or_unit() -> None:
    assert area_of("tests/integration/fleet/test_chaos.py::test_x") == "fleet"
    assert area_of("tests/integration/api/test_api_fleet.py::test_x[a/b]") == "api"
    assert area_of("tests/unit/trainer/torch_backend/test_t.py::test_x") == "unit"


def test_the_budget_table_is_read_from_the_doc_and_covers_every_area() -> None:
    budgets = read_budgets(ROOT / "docs" / "testing.md")
    folders = {p.name for p in (ROOT / "tests" / "integration").iterdir() if p.is_dir()}
    areas = {f for f in folders if any((ROOT / "tests/integration" / f).glob("test_*.py"))}
    assert areas | {"unit"} <= set(budgets), "an area without a budget in docs/testing.md"
    assert all(seconds > 0 for seconds in budgets.values())


def test_the_table_marks_an_area_over_its_budget(tmp_path: Path) -> None:
    doc = tmp_path / "testing.md"
    doc.write_text("| area | budget (s) | why |\n| --- | --- | --- |\n| fleet | 100 | x |\n")
    rows = area_table({"fleet": 130.0, "unit": 5.0}, read_budgets(doc))
    assert rows[1].split()[:3] == ["fleet", "130", "100"] and rows[1].endswith("over budget")
    assert rows[2].split() == ["unit", "5", "-"]
    assert rows[-1].split() == ["total", "135", "100"]
    assert read_budgets(tmp_path / "missing.md") == {}


def test_scopes_keep_a_module_or_a_shared_fleet_whole() -> None:
    chaos = "tests/integration/fleet/test_chaos.py"
    assert scope_of(f"{chaos}::test_a") == scope_of(f"{chaos}::test_b[x]") == chaos
    api = {scope_of("tests/integration/api/test_api_fleet.py::t"),
           scope_of("tests/integration/api/test_tinker_sdk.py::t")}  # fmt: skip
    assert api == {"api-fleet"}
    unit = "tests/unit/cli/test_watch_reconnect.py::test_a"
    assert scope_of(unit) == unit
    torch = {scope_of("tests/integration/fleet/test_fleet_job.py::t"),
             scope_of("tests/integration/agents/test_agent_kinds_fleet_slow.py::t[x]")}  # fmt: skip
    assert torch == {TORCH_FLEET}


def test_the_modules_on_the_shared_torch_fleet_are_the_ones_listed() -> None:
    """A module that asks for `torch_fleet` runs on the worker that started it."""
    users = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests" / "integration").rglob("test_*.py")
        if "torch_fleet" in path.read_text() or "torch_trainer" in path.read_text()
    }
    assert users == set(SHARED_FLEET_MODULES)


def test_the_modules_that_start_vllm_fleets_share_one_scope() -> None:
    """Two vLLM fleets at once outgrow the machine's memory: they run one after another."""
    missing = [module for module in VLLM_FLEET_MODULES if not (ROOT / module).is_file()]
    assert missing == []
    assert {scope_of(f"{module}::t") for module in VLLM_FLEET_MODULES} == {VLLM_FLEETS}
    starters = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests" / "integration").rglob("test_*.py")
        if "vllm_python()" in path.read_text()
    }
    assert starters <= set(VLLM_FLEET_MODULES), starters - set(VLLM_FLEET_MODULES)


@dataclass
class _Report:
    duration: float
    start: float
    stop: float


def test_each_workers_share_and_end_are_reported() -> None:
    spans = {"gw1": WorkerSpan(), "gw0": WorkerSpan()}
    for name, start, stop in (("gw0", 100, 130), ("gw0", 130, 160), ("gw1", 101, 111)):
        spans[name].add(_Report(stop - start, start, stop))  # type: ignore[arg-type]
    assert worker_rows(spans) == [
        "gw0: tests 60 s, done 60 s after the first start",
        "gw1: tests 10 s, done 11 s after the first start",
    ]
    assert worker_rows({}) == []


@dataclass
class _Item:
    nodeid: str


BUDGETS = {"fleet": 800, "agents": 200, "api": 100, "unit": 50}
AGENT_KINDS = "tests/integration/agents/test_agent_kinds_fleet_slow.py::t1"
FLEET_JOB = "tests/integration/fleet/test_fleet_job.py::t1"
API_1, API_2 = "tests/integration/api/test_x.py::t1", "tests/integration/api/test_x.py::t2"
CHAOS = "tests/integration/fleet/test_chaos.py"
CHAOS_1, CHAOS_2 = f"{CHAOS}::t1", f"{CHAOS}::t2"


@pytest.mark.parametrize(
    ("collected", "ordered"),
    [
        # the busiest area first, a module in its order, unit tests last
        (["tests/unit/a.py::t1", API_1, CHAOS_1, CHAOS_2, API_2],
         [CHAOS_1, CHAOS_2, API_1, API_2, "tests/unit/a.py::t1"]),
        # agent kinds and fleet jobs share the torch fleet: together, ranked as fleet
        ([AGENT_KINDS, API_1, CHAOS_1, FLEET_JOB], [AGENT_KINDS, FLEET_JOB, CHAOS_1, API_1]),
    ],
)  # fmt: skip
def test_busiest_areas_first_a_scope_together_in_its_order(
    collected: list[str], ordered: list[str]
) -> None:
    items = [_Item(i) for i in collected]
    order_by_budget(items, BUDGETS)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ordered
