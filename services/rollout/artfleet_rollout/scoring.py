"""Pure scoring logic: apply the reward service's verdicts to the rollout's own group.

The reward service answers scores parallel to the trajectories it was sent and an outcome
as fields (reward.proto); the rollout keeps its `art.TrajectoryGroup` (with token logprobs
and ids, which the reward service never sees) and applies the scores to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from artfleet.contracts.art_types import art
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2

COMPONENT_METRIC_PREFIX = "reward_"  # trajectory metric `reward_<scorer>`: unweighted value
INDEPENDENT_REWARD_METRIC = "independent_reward"


class BadScores(RuntimeError):
    """The reward service's answer does not fit the group it was sent."""


@dataclass
class Scored:
    """The group after scoring: kept trajectories and their episodes, and the outcome."""

    trajectories: list[art.Trajectory]
    episodes: list[pb.Episode]
    outcome: pb.RewardOutcome

    @property
    def stopped(self) -> bool:
        """A drop_group or fail_job failure: no trajectory of the group goes to training."""
        return self.outcome.group_dropped or bool(self.outcome.fail_job)


def apply_scores(
    trajectories: Sequence[art.Trajectory],
    episodes: Sequence[pb.Episode],
    response: reward_pb2.ScoreGroupResponse,
) -> Scored:
    """Sets rewards, component metrics, scorer metrics and logs in place; leaves out the
    trajectories (and their episodes) the outcome drops."""
    outcome = pb.RewardOutcome()
    outcome.CopyFrom(response.outcome)
    if outcome.group_dropped or outcome.fail_job:
        return Scored([], [], outcome)
    dropped = dropped_indices(response, len(trajectories))
    kept = Scored([], [], outcome)
    for i, (trajectory, episode, score) in enumerate(
        zip(trajectories, episodes, response.scores, strict=True)
    ):
        if i in dropped:
            continue
        apply_score(trajectory, score)
        kept.trajectories.append(trajectory)
        kept.episodes.append(episode)
    # The outcome lists every drop, whichever way the reward service marked it.
    del outcome.dropped[:]
    outcome.dropped.extend(sorted(dropped))
    return kept


def dropped_indices(response: reward_pb2.ScoreGroupResponse, n: int) -> set[int]:
    """The trajectories the reward service dropped, whichever way it marked them (the
    outcome's list, a score's flag); BadScores when its answer does not fit a group of `n`."""
    if len(response.scores) != n:
        raise BadScores(
            f"the reward service answered {len(response.scores)} scores for {n} trajectories"
        )
    bad = [i for i in response.outcome.dropped if not 0 <= i < n]
    if bad:
        raise BadScores(f"the reward service dropped trajectories {bad} of a group of {n}")
    return set(response.outcome.dropped) | {i for i, s in enumerate(response.scores) if s.dropped}


def apply_score(trajectory: art.Trajectory, score: reward_pb2.TrajectoryScore) -> None:
    trajectory.reward = score.reward
    for name, value in score.components.items():
        # Components as trajectory metrics: ART logs them per step for free.
        trajectory.metrics[COMPONENT_METRIC_PREFIX + name] = value
    trajectory.metrics.update(score.metrics)
    if score.HasField("independent_reward"):
        trajectory.metrics[INDEPENDENT_REWARD_METRIC] = score.independent_reward
    trajectory.logs.extend(score.logs)


def describe_outcome(outcome: pb.RewardOutcome) -> str:
    """One line for logs: what the reward service's failure policies did."""
    if outcome.fail_job:
        return f"fail the job: {outcome.fail_job}"
    failures = "; ".join(f"{f.scorer} ({f.type}): {f.message}" for f in outcome.failures)
    if outcome.group_dropped:
        return f"group dropped: {failures}"
    return f"dropped {list(outcome.dropped)}: {failures}" if outcome.dropped else failures
