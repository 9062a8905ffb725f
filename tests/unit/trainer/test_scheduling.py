from __future__ import annotations

import json
from typing import Any

import pytest

from artfleet.contracts import seeds
from artfleet.contracts.queue import decode_payload, encode_payload
from artfleet.specs.job import validate_spec
from artfleet.v1 import rollout_pb2
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


def _wire(task: rollout_pb2.GroupTask) -> rollout_pb2.GroupTask:
    """The task as a rollout worker reads it: the Celery payload the dispatcher sends."""
    return rollout_pb2.GroupTask.FromString(
        decode_payload(encode_payload(task.SerializeToString()))
    )


def test_each_group_carries_its_seed_from_the_jobs_seed_step_and_place() -> None:
    def seeds_of(seed: int, step: int, **kw: Any) -> list[int]:
        tasks = scheduling.group_tasks(
            validate_spec({"seed": seed}),
            owner=f"job-{seed}-{step}",  # the job's id takes no part
            step=step,
            scenarios=["a", "b", "a"],  # one scenario twice in a step: two groups, two seeds
            rollouts=4,
            policy="p@1",
            base_url="u",
            **kw,
        )
        return [_wire(t).seed for t in tasks]

    assert seeds_of(7, 3) == [seeds.group_seed(7, 3, i) for i in range(3)]
    assert len(set(seeds_of(7, 3))) == 3
    assert seeds_of(7, 3) == seeds_of(7, 3)
    assert not set(seeds_of(7, 3)) & set(seeds_of(7, 4))  # another step, other samples
    assert not set(seeds_of(7, 3)) & set(seeds_of(8, 3))  # another job seed too
    # An evaluation's groups are seeded alike whatever step it evaluates.
    assert seeds_of(7, 0, seed_step=seeds.EVAL_STEP) == seeds_of(7, 4, seed_step=seeds.EVAL_STEP)
