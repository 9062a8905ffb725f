"""Failures of scoring are counted per step, a step lost to them is marked, and too many
in a row fail the job naming the scorer (artfleet_trainer.jobs.scoring_health)."""

from __future__ import annotations

import pytest

from artfleet.v1 import batch_pb2
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs.scoring_health import (
    ScoringFailed,
    check,
    lost_to_scoring,
    mark,
)
from artfleet_trainer.jobs.steps import check_reward_signals
from artfleet_trainer.settings import TrainerSettings

CONTEXT_ERROR = "ContextWindowExceededError: maximum context length is 2048 tokens"


def _failure(trajectory: int = -1, action: str = "zero", scorer: str = "ruler") -> pb.ScorerFailure:
    return pb.ScorerFailure(
        scorer=scorer,
        type="invalid_output",
        message=CONTEXT_ERROR,
        trajectory=trajectory,
        action=action,
    )


def _entry(
    group_id: str,
    kept: int,
    *failures: pb.ScorerFailure,
    dropped: tuple[int, ...] = (),
    group_dropped: bool = False,
) -> batch_pb2.BatchGroup:
    return batch_pb2.BatchGroup(
        group_id=group_id,
        group=pb.TrajectoryGroup(trajectories=[pb.Trajectory() for _ in range(kept)]),
        outcome=pb.RewardOutcome(failures=failures, dropped=dropped, group_dropped=group_dropped),
    )


def test_a_group_wide_error_that_zeroed_every_reward_is_lost() -> None:
    assert lost_to_scoring(_entry("g", 4, _failure()))


def test_per_trajectory_errors_lose_the_group_only_when_they_hit_all() -> None:
    assert not lost_to_scoring(_entry("g", 3, _failure(0), _failure(1)))
    assert lost_to_scoring(_entry("g", 3, _failure(0), _failure(1), _failure(2)))
    # Dropped trajectories left the group: they count among those hit.
    dropped = _failure(2, action="drop_trajectory")
    assert lost_to_scoring(_entry("g", 2, _failure(0), _failure(1), dropped, dropped=(2,)))


def test_a_group_without_failures_or_dropped_by_a_scorer_error() -> None:
    assert not lost_to_scoring(_entry("g", 4))
    assert lost_to_scoring(_entry("g", 0, _failure(action="drop_group"), group_dropped=True))


def test_mark_counts_groups_with_errors_and_names_the_first() -> None:
    summary = pb.StepSummary(step=2)
    mark(summary, [_entry("b", 4, _failure(0, scorer="judge")), _entry("a", 4), _entry("c", 4)])
    assert summary.scorer_errors == 1
    assert summary.scorer_error == f"judge: invalid_output: {CONTEXT_ERROR}"
    assert not summary.scoring_failed  # two groups scored fine


def test_a_step_whose_every_scored_group_was_lost_is_scoring_failed() -> None:
    summary = pb.StepSummary(step=1)
    rollouts_failed = _entry("c", 0)  # no trajectories: not the reward service's doing
    zeroed, dropped = _entry("a", 4, _failure()), _entry("b", 0, _failure(), group_dropped=True)
    mark(summary, [zeroed, dropped, rollouts_failed])
    assert summary.scorer_errors == 2
    assert summary.scorer_error.startswith("ruler: invalid_output: ContextWindowExceededError")
    assert summary.scoring_failed


def test_a_step_with_no_scored_group_is_not_a_scoring_failure() -> None:
    summary = pb.StepSummary(step=1)
    mark(summary, [_entry("a", 0)])
    assert (summary.scorer_errors, summary.scorer_error, summary.scoring_failed) == (0, "", False)


def _job(*failed: bool, resumed_after: int | None = None) -> pb.Job:
    job = pb.Job(id="j1")
    for step, bad in enumerate(failed, start=1):
        job.steps.add(step=step, scoring_failed=bad, scorer_error=f"ruler: step {step} failed")
    if resumed_after is not None:
        job.resumes.add(completed_steps=resumed_after, state=pb.JOB_STATE_FAILED)
    return job


def test_n_scoring_failed_steps_in_a_row_fail_naming_the_scorer() -> None:
    check(_job(True, True), 3)  # two in a row: not yet
    check(_job(True, True, False), 2)  # the streak was broken
    with pytest.raises(ScoringFailed, match=r"steps 2-3 .*: ruler: step 3 failed"):
        check(_job(False, True, True), 2)
    with pytest.raises(ScoringFailed, match=r"step 1 "):
        check(_job(True), 1)


def test_zero_never_fails_and_a_resume_keeps_the_streak() -> None:
    check(_job(*[True] * 10), 0)
    check(_job(False, True, resumed_after=1), 2)  # a step with a signal ends a streak
    # A judge still broken after the resume: steps before it count (the first step stops it).
    with pytest.raises(ScoringFailed, match="steps 2-3"):
        check(_job(True, True, True, resumed_after=2), 2)


def test_the_limit_is_a_trainer_setting_with_a_small_default() -> None:
    settings = TrainerSettings(api_token="x" * 16)  # type: ignore[arg-type]
    assert 1 <= settings.max_scoring_failed_steps <= 3


def test_every_group_dropped_names_the_scorer_and_its_error() -> None:
    entries = [_entry("a", 0, _failure(action="drop_group"), group_dropped=True)] * 2
    with pytest.raises(RuntimeError, match="dropped 2: ruler: invalid_output: ContextWindow"):
        check_reward_signals(1, entries)
