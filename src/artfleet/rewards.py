"""Reward signals that travel inside a scored group, shared by reward, rollout and trainer.

The rollout worker forwards the reward service's group as it is, so failure policies
that must reach the trainer are written into the group itself (see reward.proto): a
group without trajectories and with one of these exception types.
"""

from __future__ import annotations

from collections.abc import Iterable

GROUP_DROPPED_EXCEPTION = "RewardGroupDropped"  # a scorer's on_error: drop_group
FAIL_JOB_EXCEPTION = "RewardFailJob"  # a scorer's on_error: fail_job
ON_ERROR_POLICIES = ("zero", "drop_trajectory", "drop_group", "fail_job")


def fail_job_reason(exceptions: Iterable[object]) -> str | None:
    """The reason a scored group asks the trainer to fail the job, if it does."""
    for exc in exceptions:
        if getattr(exc, "type", None) == FAIL_JOB_EXCEPTION:
            return str(getattr(exc, "message", "")) or "a reward scorer failed"
    return None
