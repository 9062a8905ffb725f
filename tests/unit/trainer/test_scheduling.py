from __future__ import annotations

import json

import pytest

from artfleet.specs.job import validate_spec
from artfleet_trainer.jobs import scheduling

IDS = [f"s{i}" for i in range(5)]


def test_steps_walk_whole_epochs_without_repeats() -> None:
    picked = [s for step in range(1, 6) for s in scheduling.scenarios_for_step(IDS, 7, step, 2)]
    # 10 picks = 2 epochs: each epoch is a permutation of all scenarios.
    assert sorted(picked[:5]) == IDS and sorted(picked[5:]) == IDS


def test_deterministic_from_seed_and_step_only() -> None:
    again = scheduling.scenarios_for_step(list(reversed(IDS)), 7, 3, 2)
    assert scheduling.scenarios_for_step(IDS, 7, 3, 2) == again
    seeds = {tuple(scheduling.scenarios_for_step(IDS, seed, 1, 5)) for seed in range(10)}
    assert len(seeds) > 1


def test_empty_split_is_an_error() -> None:
    with pytest.raises(ValueError):
        scheduling.scenarios_for_step([], 0, 1, 1)


@pytest.mark.parametrize(
    ("groups", "fraction", "expected"),
    [(4, 0.5, 2), (3, 0.5, 2), (1, 0.1, 1), (10, 1.0, 10), (7, 0.3, 3)],
)
def test_quorum(groups: int, fraction: float, expected: int) -> None:
    assert scheduling.quorum(groups, fraction) == expected


def test_mean_std() -> None:
    assert scheduling.mean_std([]) == (0.0, 0.0)
    assert scheduling.mean_std([1.0, 3.0]) == (2.0, 1.0)


def test_dataset_size_fixes_a_subset_by_seed() -> None:
    subset = scheduling.dataset(IDS, 3, 4)
    assert len(subset) == 4 and set(subset) <= set(IDS)
    assert scheduling.dataset(IDS, 3, 4) == subset and scheduling.dataset(IDS, 0, 0) == IDS
    picked = {
        s
        for step in range(1, 20)
        for s in scheduling.scenarios_for_step(IDS, 3, step, 3, dataset_size=4)
    }
    assert picked == set(subset)


def test_num_epochs_ends_the_stream() -> None:
    n = len(IDS)
    steps = [scheduling.scenarios_for_step(IDS, 1, s, 3, num_epochs=2) for s in range(1, 20)]
    flat = [x for step in steps for x in step]
    assert len(flat) == 2 * n and all(flat.count(i) == 2 for i in IDS)
    assert scheduling.steps_with_scenarios(n, 3, 100, 2) == -(-2 * n // 3)
    assert scheduling.steps_with_scenarios(n, 3, 100, 0) == 100


def test_group_tasks_carry_the_jobs_mcp_server() -> None:
    server = {"local": {"command": "artfleet-mcp-2048", "args": []}}
    spec = validate_spec({"environments": {"2048": {"mcp_config": server}}})
    tasks = scheduling.group_tasks(
        spec, owner="j", step=1, scenarios=["2048-00"], rollouts=2, policy="a@0", base_url="u"
    )
    assert json.loads(tasks[0].mcp_config) == server
    plain = scheduling.group_tasks(
        validate_spec({}),
        owner="j",
        step=1,
        scenarios=["s"],
        rollouts=2,
        policy="a@0",
        base_url="u",
    )
    assert plain[0].mcp_config == ""  # each scenario's own server
