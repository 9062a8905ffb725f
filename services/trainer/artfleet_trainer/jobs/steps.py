"""Pure step logic: rebuild ART groups from a step's batch and summarize the step."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from artfleet.contracts import codec
from artfleet.contracts.art_types import art
from artfleet.v1 import batch_pb2
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs.scheduling import mean_std
from artfleet_trainer.jobs.scoring_health import first_error


def build_groups(entries: Sequence[batch_pb2.BatchGroup]) -> list[art.TrajectoryGroup]:
    """The groups to train on, in group-id order: those with trajectories that the reward
    service neither dropped nor failed the job on."""
    ordered = sorted(entries, key=lambda e: e.group_id)
    return [
        codec.group_from_proto(e.group)
        for e in ordered
        if e.group.trajectories and not e.outcome.group_dropped and not e.outcome.fail_job
    ]


class RewardFailedJob(RuntimeError):
    """A reward scorer whose failure policy is fail_job failed on one of the step's groups."""


def check_reward_signals(step: int, entries: Sequence[batch_pb2.BatchGroup]) -> None:
    """What the reward service's failure policies ask of the step (RewardOutcome in
    common.proto): a fail_job outcome fails the job; a step whose every group was dropped
    says so. A step whose rollouts all failed is the caller's to report."""
    for entry in entries:
        if entry.outcome.fail_job:
            raise RewardFailedJob(f"step {step}: {entry.outcome.fail_job}")
    if any(e.group.trajectories and not e.outcome.group_dropped for e in entries):
        return
    dropped = sum(e.outcome.group_dropped for e in entries)
    if dropped:
        # The scorer and its error are the reason: name them where the user looks first.
        error = first_error(entries)
        why = f": {error}" if error else ""
        raise RuntimeError(
            f"step {step}: no group left to train on; the reward service dropped {dropped}"
            f"{why} (see artfleet_reward_failures_total and the reward service's log)"
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
