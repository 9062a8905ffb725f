"""Failed episodes, made visible: counted by type in each step's summary, a warning when a
step lost more than a share of its episodes (`ARTFLEET_EPISODE_FAILURE_WARN_SHARE`), and
the first failure (its type, message and where the user's code raised it, with the job id
and the request id of the rollout log lines) in the job's error when a step had nothing
left to train on. What a failure record holds: `artfleet.contracts.failures`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from artfleet.contracts import failures
from artfleet.v1 import batch_pb2
from artfleet.v1 import common_pb2 as pb

log = logging.getLogger(__name__)


def _ordered(entries: Sequence[batch_pb2.BatchGroup]) -> list[batch_pb2.BatchGroup]:
    return sorted(entries, key=lambda e: e.group_id)


def first(entries: Sequence[batch_pb2.BatchGroup]) -> tuple[str, pb.RolloutException] | None:
    """The step's first failure (group-id order) and its group's id."""
    for entry in _ordered(entries):
        if entry.group.exceptions:
            return entry.group_id, entry.group.exceptions[0]
    return None


def _all(entries: Sequence[batch_pb2.BatchGroup]) -> list[pb.RolloutException]:
    return [f for e in _ordered(entries) for f in e.group.exceptions]


def _logs(job_id: str, failure: pb.RolloutException) -> str:
    """What finds the failure's lines in the rollout worker logs."""
    request = f", request {failure.request_id}" if failure.request_id else ""
    return f"job {job_id}{request}"


def mark(
    job_id: str,
    summary: pb.StepSummary,
    entries: Sequence[batch_pb2.BatchGroup],
    episodes: int,
    warn_share: float,
) -> None:
    """Fill the summary's episode failure counts and, when more than `warn_share` of the
    step's `episodes` (groups x rollouts) failed, its `failure_warning`."""
    counts = failures.count(_all(entries))
    summary.episodes = episodes
    summary.episodes_failed = sum(counts.values())
    summary.episode_failures.clear()
    summary.episode_failures.update(counts)
    found = first(entries)
    if found is None or summary.episodes_failed <= warn_share * episodes:
        return
    group_id, failure = found
    summary.failure_warning = (
        f"{summary.episodes_failed}/{episodes} episodes failed (more than {warn_share:.0%}): "
        f"{failures.breakdown(counts)}; first: {failures.describe(failure)} "
        f"(rollout logs: {_logs(job_id, failure)})"
    )
    log.warning(
        "job %s step %d group %s: %s", job_id, summary.step, group_id, summary.failure_warning
    )


def nothing_trained(job_id: str, step: int, entries: Sequence[batch_pb2.BatchGroup]) -> str:
    """The job's error when every rollout of the step failed (the reward service dropped
    none): the counts, the first failure where the user's code raised it, and what finds
    its lines in the rollout worker logs."""
    found = first(entries)
    if found is None:
        return f"step {step}: every rollout failed; see the rollout worker logs for job {job_id}"
    group_id, failure = found
    return (
        f"step {step}: every rollout failed ({failures.breakdown(failures.count(_all(entries)))}); "
        f"first, in group {group_id}: {failures.describe(failure)}; "
        f"see the rollout worker logs for {_logs(job_id, failure)}"
    )
