"""A reward verdict applied to the group it scored.

`Reward.ScoreGroup` answers scores parallel to the request's trajectories and an outcome
(see reward.proto), not the group: the caller keeps its own trajectories, token logprobs
included, and applies the verdict with `apply_scores`. What a failure policy decided
(`outcome.group_dropped`, `outcome.fail_job`, `outcome.dropped`) stays in the outcome, as
fields; it is never written into the group.
"""

from __future__ import annotations

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2

METRIC_PREFIX = "reward_"  # trajectory metric `reward_<scorer>` = its unweighted component
INDEPENDENT_REWARD = "independent_reward"  # as ART's ruler_score_group names it


def _apply(trajectory: pb.Trajectory, score: reward_pb2.TrajectoryScore) -> None:
    trajectory.reward = score.reward
    for name, value in score.components.items():
        # Components as trajectory metrics: ART logs them per step for free.
        trajectory.metrics[METRIC_PREFIX + name].float_value = value
    for name, value in score.metrics.items():
        trajectory.metrics[name].float_value = value
    if score.HasField("independent_reward"):
        trajectory.metrics[INDEPENDENT_REWARD].float_value = score.independent_reward
    trajectory.logs.extend(score.logs)


def apply_scores(
    group: pb.TrajectoryGroup, response: reward_pb2.ScoreGroupResponse
) -> pb.TrajectoryGroup:
    """A copy of `group` with rewards, component metrics and scorer logs set, and without
    its dropped trajectories. A dropped group or a failed job leaves no trajectories: the
    caller reads why from `response.outcome`."""
    scored = pb.TrajectoryGroup()
    scored.CopyFrom(group)
    del scored.trajectories[:]
    outcome = response.outcome
    if outcome.group_dropped or outcome.fail_job:
        return scored
    if len(response.scores) != len(group.trajectories):
        raise ValueError(
            f"{len(response.scores)} scores for {len(group.trajectories)} trajectories"
        )
    for trajectory, score in zip(group.trajectories, response.scores, strict=True):
        if score.dropped:
            continue
        kept = scored.trajectories.add()
        kept.CopyFrom(trajectory)
        _apply(kept, score)
    return scored
