"""The trainer reads the reward service's failure policies from typed outcome fields."""

from __future__ import annotations

import pytest

from artfleet.v1 import batch_pb2
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs.steps import RewardFailedJob, check_reward_signals


def _entry(
    trajectories: int = 0, *, fail_job: str = "", dropped: bool = False, error: str = ""
) -> batch_pb2.BatchGroup:
    entry = batch_pb2.BatchGroup(
        group=pb.TrajectoryGroup(trajectories=[pb.Trajectory() for _ in range(trajectories)]),
        outcome=pb.RewardOutcome(fail_job=fail_job, group_dropped=dropped),
    )
    if error:
        entry.group.exceptions.add(type="ValueError", message=error)
    return entry


def test_fail_job_fails_the_step_with_the_reason() -> None:
    entries = [_entry(2), _entry(fail_job="scorer 'ruler' timed out")]
    with pytest.raises(RewardFailedJob, match="step 3: scorer 'ruler' timed out"):
        check_reward_signals(3, entries)


def test_fail_job_wins_over_trajectories_in_the_same_group() -> None:
    with pytest.raises(RewardFailedJob, match="judge down"):
        check_reward_signals(1, [_entry(2, fail_job="judge down")])


def test_dropped_groups_are_fine_while_others_remain() -> None:
    check_reward_signals(1, [_entry(2), _entry(dropped=True)])
    check_reward_signals(1, [_entry(error="boom")])  # a rollout failure: the caller's call


def test_a_step_whose_groups_were_all_dropped_says_so() -> None:
    with pytest.raises(RuntimeError, match="reward service dropped 2"):
        check_reward_signals(2, [_entry(dropped=True)] * 2)
