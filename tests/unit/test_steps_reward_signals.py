"""The trainer reads the reward service's failure policies from the scored groups."""

from __future__ import annotations

import pytest

from artfleet.rewards import FAIL_JOB_EXCEPTION, GROUP_DROPPED_EXCEPTION
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_trainer.steps import RewardFailedJob, check_reward_signals


def _response(*exceptions: str, trajectories: int = 0) -> rollout_pb2.RunGroupResponse:
    group = pb.TrajectoryGroup(
        trajectories=[pb.Trajectory() for _ in range(trajectories)],
        exceptions=[pb.RolloutException(type=t, message=f"{t} because") for t in exceptions],
    )
    return rollout_pb2.RunGroupResponse(group=group)


def test_fail_job_fails_the_step_with_the_reason() -> None:
    responses = [_response(trajectories=2), _response(FAIL_JOB_EXCEPTION)]
    with pytest.raises(RewardFailedJob, match="RewardFailJob because"):
        check_reward_signals(3, responses)


def test_dropped_groups_are_fine_while_others_remain() -> None:
    check_reward_signals(1, [_response(trajectories=2), _response(GROUP_DROPPED_EXCEPTION)])
    check_reward_signals(1, [_response("ValueError")])  # a rollout failure: the caller's call


def test_a_step_whose_groups_were_all_dropped_says_so() -> None:
    with pytest.raises(RuntimeError, match="reward service dropped 2"):
        check_reward_signals(2, [_response(GROUP_DROPPED_EXCEPTION)] * 2)
