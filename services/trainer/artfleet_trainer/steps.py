"""Pure step logic: rebuild ART groups from rollout responses and summarize a step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from artfleet import codec
from artfleet.art_types import art
from artfleet.rewards import GROUP_DROPPED_EXCEPTION, fail_job_reason
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_trainer.scheduling import mean_std


def build_groups(responses: Sequence[rollout_pb2.RunGroupResponse]) -> list[art.TrajectoryGroup]:
    """Groups in a stable order; a group whose rollouts all failed has no trajectories."""
    ordered = sorted(responses, key=lambda r: str(r.group.metadata["group_id"].string_value))
    return [codec.group_from_proto(r.group) for r in ordered]


class RewardFailedJob(RuntimeError):
    """A reward scorer whose failure policy is fail_job failed on one of the step's groups."""


def check_reward_signals(step: int, responses: Sequence[rollout_pb2.RunGroupResponse]) -> None:
    """What the reward service's failure policies ask of the step (see reward.proto): a
    fail_job failure fails the job; a step whose every group was dropped says so."""
    for response in responses:
        reason = fail_job_reason(response.group.exceptions)
        if reason is not None:
            raise RewardFailedJob(reason)
    if any(r.group.trajectories for r in responses):
        return
    dropped = sum(
        any(e.type == GROUP_DROPPED_EXCEPTION for e in r.group.exceptions) for r in responses
    )
    if dropped:
        raise RuntimeError(
            f"step {step}: no group left to train on; the reward service dropped {dropped} "
            "(see artfleet_reward_failures_total and the reward service's log)"
        )


def _turns(trajectory: art.Trajectory) -> float:
    value = trajectory.metrics.get("turns")
    return float(value) if value is not None else 0.0


def _finite(value: object) -> float:
    number = float(value)  # type: ignore[arg-type]
    return number if math.isfinite(number) else 0.0


def summarize_step(
    step: int, groups: Sequence[art.TrajectoryGroup], result: Any, rollout_s: float, step_s: float
) -> pb.StepSummary:
    trajectories = [t for g in groups for t in g.trajectories]
    reward_mean, reward_std = mean_std([t.reward for t in trajectories])
    turns_mean, _ = mean_std([_turns(t) for t in trajectories])
    train_metrics = dict(getattr(result, "metrics", {}) or {})
    return pb.StepSummary(
        step=step,
        reward_mean=reward_mean,
        reward_std=reward_std,
        turns_mean=turns_mean,
        step_seconds=step_s,
        trajectories=len(trajectories),
        groups=sum(1 for g in groups if g.trajectories),
        loss=_finite(train_metrics.get("loss", 0.0)),
        trained_sequences=int(train_metrics.get("trained_sequences", 0)),
        rollout_seconds=rollout_s,
        train_seconds=step_s - rollout_s,
    )
