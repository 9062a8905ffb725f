"""Checkpoint retention: after each step keep a job's last K checkpoints plus the best
by an eval metric; delete the rest. Files only, in ART's layout
(`{art_path}/{project}/models/{name}/checkpoints/{step:04d}/`), which both backends write,
so no backend method is needed. The latest checkpoint (the one served) is always kept.
The best one is also marked on disk (checkpoint_layout.write_best): `name@best` there.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from pathlib import Path

from artfleet.checkpoint_layout import checkpoint_steps, marked_best, model_dir, write_best
from artfleet.jobspec import JobSpecModel
from artfleet.v1 import common_pb2 as pb

log = logging.getLogger(__name__)


def best_step(
    evals: Iterable[pb.EvalSummary], metric: str, steps: Iterable[int], offset: int = 0
) -> int | None:
    """The evaluated checkpoint with the highest `metric` among `steps`; ties go to the
    later. An eval's step is the job's step; its checkpoint is that plus `offset` (the
    checkpoints before step 1: an SFT phase's adapter)."""
    present = set(steps)
    scored = [(getattr(e, metric), e.step + offset) for e in evals if e.step + offset in present]
    return max(scored)[1] if scored else None


def steps_to_keep(steps: list[int], keep_last: int, best: int | None) -> set[int]:
    keep = set(steps[-keep_last:]) if keep_last else set(steps)
    if steps:
        keep.add(steps[-1])
    if best is not None:
        keep.add(best)
    return keep


def mark_best(directory: Path, job: pb.Job, metric: str, steps: list[int]) -> int | None:
    """The best checkpoint by `metric` ("" = none), marked on disk when it changed."""
    if not metric:
        return None
    offset = job.sft.checkpoint_step if job.sft.done else 0
    best = best_step(job.evals, metric, steps, offset)
    if best is not None and best != marked_best(directory):
        value = max(getattr(e, metric) for e in job.evals if e.step + offset == best)
        write_best(directory, best, metric, float(value))
    return best


def apply(art_path: str, model_name: str, job: pb.Job, spec: JobSpecModel) -> list[int]:
    """Mark the best checkpoint and delete what the job's retention does not keep;
    returns the deleted steps."""
    directory = model_dir(art_path, spec.project, model_name)
    steps = checkpoint_steps(directory)
    best = mark_best(directory, job, spec.keep_best_metric, steps)
    if not spec.keep_last:
        return []
    keep = steps_to_keep(steps, spec.keep_last, best)
    deleted = [s for s in steps if s not in keep]
    for step in deleted:
        shutil.rmtree(directory / "checkpoints" / f"{step:04d}", ignore_errors=True)
    if deleted:
        log.info("job %s: deleted checkpoints %s, kept %s", job.id, deleted, sorted(keep))
    return deleted
