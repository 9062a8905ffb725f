"""Checkpoint retention: after each step keep a job's last K checkpoints plus the best
by an eval metric; delete the rest. Files only, in ART's layout
(`{art_path}/{project}/models/{name}/checkpoints/{step:04d}/`), which both backends write,
so no backend method is needed. The latest checkpoint (the one served) is always kept.
The best one is also marked on disk (checkpoint_layout.write_best): `name@best` there.
`artfleet models prune` (Trainer.ModelsPrune) applies the same rule after the fact.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from artfleet.contracts.checkpoint_layout import (
    checkpoint_steps,
    marked_best,
    model_dir,
    step_dir,
    write_best,
)
from artfleet.specs.job import JobSpecModel
from artfleet.v1 import common_pb2 as pb

log = logging.getLogger(__name__)


def best_scored(
    evals: Iterable[pb.EvalSummary], metric: str, steps: Iterable[int], offset: int = 0
) -> tuple[float, int] | None:
    """(value, step) of the evaluated checkpoint with the highest `metric` among `steps`;
    ties go to the later. An eval's step is the job's step; its checkpoint is that plus
    `offset` (the checkpoints before step 1: an SFT phase's adapter)."""
    present = set(steps)
    scored = [(getattr(e, metric), e.step + offset) for e in evals if e.step + offset in present]
    return max(scored) if scored else None


def keep_reasons(
    steps: list[int], newest: int, best: int | None, in_use: Mapping[int, str] | None = None
) -> dict[int, str]:
    """The steps kept, each with why: the `newest` N, the one marked `best`, and those
    `in_use` (a running job's latest and served checkpoints, with why). `steps` ascending."""
    reasons = {step: f"newest {newest}" for step in (steps[-newest:] if newest else [])}
    for step, why in (in_use or {}).items():
        if step in steps:
            reasons.setdefault(step, why)
    if best is not None and best in steps:
        reasons[best] = "best"
    return reasons


def steps_to_keep(steps: list[int], keep_last: int, best: int | None) -> set[int]:
    """During a run: the last `keep_last` (0 = all), the best and the latest (served)."""
    return set(
        keep_reasons(steps, keep_last or len(steps), best, {s: "latest" for s in steps[-1:]})
    )


def delete_steps(directory: Path, steps: Iterable[int]) -> None:
    for step in steps:  # a concurrent retention pass may have taken it already
        shutil.rmtree(step_dir(directory, step), ignore_errors=True)


def mark_best(directory: Path, job: pb.Job, metric: str, steps: list[int]) -> int | None:
    """The best checkpoint by `metric` ("" = none), marked on disk when it changed."""
    if not metric:
        return None
    offset = job.sft.checkpoint_step if job.sft.done else 0
    scored = best_scored(job.evals, metric, steps, offset)
    if scored is None:
        return None
    value, best = scored
    if best != marked_best(directory):
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
    delete_steps(directory, deleted)
    if deleted:
        log.info("job %s: deleted checkpoints %s, kept %s", job.id, deleted, sorted(keep))
    return deleted
