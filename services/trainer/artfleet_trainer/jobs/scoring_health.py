"""Failures of scoring, made visible and bounded.

The reward service's failure policies keep a step going when a scorer fails (`on_error:
zero` scores 0, `drop_*` leaves trajectories out), and each group's `RewardOutcome` lists
what failed. A judge that fails on every group (a context too small, a key refused) then
trains on nothing but zeros, step after step, with no error anywhere. So each step's
summary counts the groups whose scorers errored and keeps the first error's text, a step
whose every scored group was zeroed or dropped by such errors is `scoring_failed`, and
`max_scoring_failed_steps` of those in a row stop the job, naming the scorer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from artfleet.v1 import batch_pb2
from artfleet.v1 import common_pb2 as pb

log = logging.getLogger(__name__)
GROUP = -1  # a failure's `trajectory` when it concerns the whole group (the reward service's)
_ERROR_CHARS = 500  # the reward service's messages are cut there too


class ScoringFailed(RuntimeError):
    """Scorers failed on every group of too many steps in a row: training has no signal."""


def error_text(failure: pb.ScorerFailure) -> str:
    """ "scorer: type: message", as the step summary and the job's error show it."""
    return f"{failure.scorer}: {failure.type}: {failure.message}"[:_ERROR_CHARS]


def _scored(entry: batch_pb2.BatchGroup) -> bool:
    """The reward service saw the group (its rollouts did not all fail)."""
    return bool(entry.group.trajectories) or entry.outcome.group_dropped


def lost_to_scoring(entry: batch_pb2.BatchGroup) -> bool:
    """Every trajectory of the group was zeroed or dropped by a scorer error."""
    outcome = entry.outcome
    if not outcome.failures:
        return False
    if outcome.group_dropped or any(f.trajectory == GROUP for f in outcome.failures):
        return True
    # The scored group: the trajectories kept plus those dropped (the rollout removes them).
    size = len(entry.group.trajectories) + len(outcome.dropped)
    hit = {f.trajectory for f in outcome.failures} | set(outcome.dropped)
    return hit >= set(range(size))


def first_error(entries: Sequence[batch_pb2.BatchGroup]) -> str:
    """The first scorer error of the step, in group-id order ("" for none)."""
    for entry in sorted(entries, key=lambda e: e.group_id):
        if entry.outcome.failures:
            return error_text(entry.outcome.failures[0])
    return ""


def mark(summary: pb.StepSummary, entries: Sequence[batch_pb2.BatchGroup]) -> None:
    """Fill the step summary's scorer_errors, scorer_error and scoring_failed."""
    scored = [e for e in entries if _scored(e)]
    summary.scorer_errors = sum(1 for e in scored if e.outcome.failures)
    summary.scorer_error = first_error(scored)
    summary.scoring_failed = bool(scored) and all(lost_to_scoring(e) for e in scored)


def failed_streak(job: pb.Job) -> list[pb.StepSummary]:
    """The job's latest steps that were all scoring_failed, oldest first. A ResumeJob
    keeps the streak: a judge still broken stops the resumed job at its first step, one
    the user fixed ends it (a step with a signal)."""
    streak: list[pb.StepSummary] = []
    for summary in reversed(job.steps):
        if not summary.scoring_failed:
            break
        streak.append(summary)
    return streak[::-1]


def check(job: pb.Job, limit: int) -> None:
    """Raise ScoringFailed once `limit` steps in a row were scoring_failed (0: never)."""
    streak = failed_streak(job)
    if streak:
        log.warning(
            "job %s step %d: scorers failed on every group (%d step(s) in a row): %s",
            job.id,
            streak[-1].step,
            len(streak),
            streak[-1].scorer_error,
        )
    if limit <= 0 or len(streak) < limit:
        return
    first, last = streak[-limit], streak[-1]
    steps = f"step {last.step}" if limit == 1 else f"steps {first.step}-{last.step}"
    raise ScoringFailed(
        f"the reward's scorers failed on every group of {steps} "
        f"({limit} in a row, ARTFLEET_MAX_SCORING_FAILED_STEPS): {last.scorer_error}; "
        "the job trained on no reward signal. Fix the scorer (its judge endpoint, key or "
        "context), then `artfleet jobs resume` it"
    )
