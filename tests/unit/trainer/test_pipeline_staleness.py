"""The async-step pieces that need no Redis: the spec field, the staleness rule, and the
rollout's reading of the served `name@step`."""

from __future__ import annotations

import pytest

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import JobSpecModel, spec_from_proto, spec_to_proto, validate_spec
from artfleet.v1 import batch_pb2
from artfleet.v1 import common_pb2 as pb
from artfleet_rollout.adapters import served_version
from artfleet_trainer.jobs.pipeline import group_version, stale_groups, staleness_of


def test_max_steps_off_policy_defaults_to_sync_and_round_trips() -> None:
    assert JobSpecModel().max_steps_off_policy == 0
    spec = validate_spec({"max_steps_off_policy": 2})
    assert spec_from_proto(spec_to_proto(spec)).max_steps_off_policy == 2


@pytest.mark.parametrize("value", [-1, 9, "two"])
def test_a_bad_max_steps_off_policy_names_the_field(value: object) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_spec({"max_steps_off_policy": value})
    assert info.value.field == "max_steps_off_policy"


def _entry(gid: str, versions: list[int | None], dropped: bool = False) -> batch_pb2.BatchGroup:
    entry = batch_pb2.BatchGroup(group_id=gid)
    for v in versions:
        t = entry.group.trajectories.add(reward=1.0)
        if v is not None:
            t.initial_policy_version = v
    entry.outcome.CopyFrom(pb.RewardOutcome(group_dropped=dropped))
    return entry


def test_the_oldest_trajectory_decides_a_groups_version() -> None:
    assert group_version(_entry("g", [3, 2, 4]), fallback=9) == 2
    assert group_version(_entry("g", [None, 5]), fallback=1) == 1


def test_groups_past_the_bound_are_stale_and_dropped_groups_are_not_counted() -> None:
    entries = [_entry("a", [4, 4]), _entry("b", [3, 4]), _entry("c", [1], dropped=True)]
    assert stale_groups(entries, trained_version=5, k=1, fallback=5) == ["b"]
    assert stale_groups(entries, trained_version=5, k=2, fallback=5) == []
    assert staleness_of(entries, trained_version=5, fallback=5) == [1, 1, 2, 1]


@pytest.mark.parametrize(
    ("name", "version"),
    [("agent-1@3", 3), ("a@b@12", 12), ("agent", None), ("agent@", None), ("x@v2", None)],
)
def test_the_served_step_is_read_from_the_model_name(name: str, version: int | None) -> None:
    assert served_version(name) == version
