"""Reward replies seen the way the rollout uses them, for the reward service's tests.

`Reward.ScoreGroup` answers scores and an outcome, not the group; the rollout applies them
to its own trajectories (`artfleet_rollout.scoring.apply_scores`). Tests of the reward
service check a reply by applying it through that same code.
"""

from __future__ import annotations

from artfleet.contracts import codec
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2
from artfleet_rollout.scoring import apply_scores


def with_verdict(
    group: pb.TrajectoryGroup, response: reward_pb2.ScoreGroupResponse
) -> pb.TrajectoryGroup:
    """`group` with the reply applied: rewards and metrics set, dropped trajectories gone;
    no trajectory at all when the group was dropped or the job must fail."""
    trajectories = codec.group_from_proto(group).trajectories
    scored = apply_scores(trajectories, [pb.Episode() for _ in trajectories], response)
    out = pb.TrajectoryGroup()
    out.CopyFrom(group)  # group-level fields are the caller's own, untouched
    del out.trajectories[:]
    out.trajectories.extend(codec.trajectory_to_proto(t) for t in scored.trajectories)
    return out
