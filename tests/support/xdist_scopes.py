"""How `make test` spreads the tests over pytest-xdist workers (`-n 2 --dist loadscope`).

A scope is the unit one worker runs whole: every integration module is one (its
module-wide fleet starts once, its tests run in order), the modules that share a
session-wide fleet are one together (`SHARED_FLEET_FOLDERS`, `SHARED_FLEET_MODULES`: the
fleet starts once, on one worker), so are the modules with vLLM fleets (`VLLM_FLEET_MODULES`:
one at a time, for memory), and each unit test is its own. The scopes are scheduled
in collection order, which on a worker puts the busiest areas first (`order_by_budget`),
so the long fleets start early and short tests fill in at the end. (xdist's own
`--dist loadgroup` relies on rewriting a test's node id, which pytest 9 no longer lets it
do; a scheduler is xdist's documented hook.)
"""

from __future__ import annotations

from typing import Any

import pytest
from area_times import area_of

# Folders whose modules share one session-wide fleet (tests/integration/api/conftest.py).
SHARED_FLEET_FOLDERS = {"tests/integration/api/": "api-fleet"}
# Modules that use the session's shared torch fleet (`torch_fleet`,
# tests/integration/conftest.py); a unit test keeps this list and the fixture's users equal.
TORCH_FLEET = "torch-fleet"
SHARED_FLEET_MODULES = {
    "tests/integration/agents/test_agent_kinds_fleet_slow.py": TORCH_FLEET,
    "tests/integration/fleet/test_fleet_correction.py": TORCH_FLEET,
    "tests/integration/fleet/test_fleet_job.py": TORCH_FLEET,
    "tests/integration/fleet/test_fleet_sft.py": TORCH_FLEET,
}

# Modules that start fleets with vLLM: one scope, so that no two run at once. The
# two-replica fleet beside the two-node trainer's fleet took more memory than the 24 GB
# machine has: the OOM killer ended the trainer mid-job, twice in fresh-clone runs here.
VLLM_FLEETS = "vllm-fleets"
VLLM_FLEET_MODULES = (
    "tests/integration/fleet/test_first_hour.py",
    "tests/integration/fleet/test_trainer_nodes_fleet_slow.py",
    "tests/integration/inference/test_inference_outages_slow.py",
    "tests/integration/inference/test_vllm_fleet_slow.py",
    "tests/integration/inference/test_vllm_process_slow.py",
)


def scope_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    if path in SHARED_FLEET_MODULES:
        return SHARED_FLEET_MODULES[path]
    if path in VLLM_FLEET_MODULES:
        return VLLM_FLEETS
    for folder, scope in SHARED_FLEET_FOLDERS.items():
        if path.startswith(folder):
            return scope
    return path if path.startswith("tests/integration/") else nodeid


def order_by_budget(items: list[pytest.Item], budgets: dict[str, int]) -> None:
    """Busiest areas first; a scope stays together (ranked by its busiest area), and within
    a scope, collection order (a module stays whole)."""
    rank: dict[str, tuple[int, int]] = {}  # scope: (-its busiest area's budget, first index)
    for index, item in enumerate(items):
        scope = scope_of(item.nodeid)
        least, first = rank.get(scope, (0, index))
        rank[scope] = (min(least, -budgets.get(area_of(item.nodeid), 0)), first)
    items.sort(key=lambda item: rank[scope_of(item.nodeid)])


class FleetScopesPlugin:
    """Registered on the controller when xdist is there: serves `--dist loadscope`."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getoption("dist") != "loadscope":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class FleetScopes(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return scope_of(nodeid)

        config.option.loadscopereorder = False  # the workers' order is the plan
        return FleetScopes(config, log)
