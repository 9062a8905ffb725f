"""A step's failed episodes in its summary and the job's error
(artfleet_trainer.jobs.episode_failures): counted by type over the step's groups, a warning
past the share, and the first failure where the user's code raised it, with the job id and
the rollout log's request id."""

from __future__ import annotations

from artfleet.v1 import batch_pb2
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs import episode_failures

FRAMES = ["quiz/rollout.py:40 in rollout", "quiz/checks.py:12 in check_answer"]


def _entry(
    group_id: str, trajectories: int, *failures: pb.RolloutException
) -> batch_pb2.BatchGroup:
    entry = batch_pb2.BatchGroup(group_id=group_id)
    entry.group.trajectories.extend(pb.Trajectory() for _ in range(trajectories))
    entry.group.exceptions.extend(failures)
    return entry


def _assertion(request_id: str = "") -> pb.RolloutException:
    return pb.RolloutException(type="AssertionError", frames=FRAMES, request_id=request_id)


def _step(failed_in_b: int) -> list[batch_pb2.BatchGroup]:
    """Two groups of 4: group b (first in id order) with `failed_in_b` assertion failures,
    group c with one KeyError."""
    key = pb.RolloutException(type="KeyError", message="answer", request_id="r-c")
    return [
        _entry("c", 3, key),
        _entry("b", 4 - failed_in_b, *[_assertion("r-b") for _ in range(failed_in_b)]),
    ]


def test_the_summary_counts_failed_episodes_by_type() -> None:
    summary = pb.StepSummary(step=2)
    episode_failures.mark("job-1", summary, _step(1), episodes=8, warn_share=0.25)
    assert dict(summary.episode_failures) == {"AssertionError": 1, "KeyError": 1}
    assert (summary.episodes_failed, summary.episodes) == (2, 8)
    assert summary.failure_warning == ""  # 2 of 8 is not more than a quarter


def test_a_step_past_the_share_warns_naming_the_first_failure_and_its_logs() -> None:
    summary = pb.StepSummary(step=2)
    episode_failures.mark("job-1", summary, _step(2), episodes=8, warn_share=0.25)
    assert summary.failure_warning == (
        "3/8 episodes failed (more than 25%): 2 AssertionError, 1 KeyError; first: "
        "AssertionError at quiz/checks.py:12 in check_answer < quiz/rollout.py:40 in rollout "
        "(rollout logs: job job-1, request r-b)"
    )
    quiet = pb.StepSummary()
    episode_failures.mark("job-1", quiet, [_entry("a", 4)], episodes=4, warn_share=0.0)
    assert quiet.episodes_failed == 0 and quiet.failure_warning == ""


def test_a_group_that_could_not_run_counts_for_each_of_its_episodes() -> None:
    summary = pb.StepSummary()
    lost = pb.RolloutException(type="InvalidArgument", message="task.environment", episodes=4)
    episode_failures.mark("j", summary, [_entry("a", 0, lost)], episodes=4, warn_share=0.25)
    assert dict(summary.episode_failures) == {"InvalidArgument": 4}
    assert summary.failure_warning.startswith("4/4 episodes failed")


def test_a_step_whose_rollouts_all_failed_says_what_where_and_which_logs() -> None:
    entries = [_entry("g2", 0, pb.RolloutException(type="ValueError", message="sandbox gone"))]
    entries.append(_entry("g1", 0, *[_assertion("4f2a9c") for _ in range(4)]))
    assert episode_failures.nothing_trained("job-7", 4, entries) == (
        "step 4: every rollout failed (4 AssertionError, 1 ValueError); first, in group g1: "
        "AssertionError at quiz/checks.py:12 in check_answer < quiz/rollout.py:40 in rollout; "
        "see the rollout worker logs for job job-7, request 4f2a9c"
    )
    assert episode_failures.nothing_trained("job-7", 1, [_entry("g", 0)]) == (
        "step 1: every rollout failed; see the rollout worker logs for job job-7"
    )
