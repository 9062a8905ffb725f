"""The R2E-Gym training script's `--log-sample-rate`: a fraction of each step's rollouts
written as readable JSON (artfleet.contracts.trajlog's shape) under
`<log dir>/<experiment>/step_<n>/`, beside ART's parquet trajectory logs, for people (and
the web console) to inspect.

Which trajectories are sampled is decided by a hash of (job, step, group, index), so a
step that runs again after a restart writes the same files, not a second sample.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

from artfleet.contracts import trajlog
from artfleet.specs.job import JobSpecModel
from artfleet.v1 import batch_pb2
from artfleet.v1 import common_pb2 as pb

log = logging.getLogger(__name__)


def sampled(rate: float, *key: object) -> bool:
    if rate <= 0:
        return False
    if rate >= 1:
        return True
    digest = hashlib.sha256("/".join(map(str, key)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def step_dir(log_dir: str, experiment: str, step: int) -> Path:
    return Path(log_dir) / experiment / f"step_{step}"


def write_step(
    log_dir: str, job: pb.Job, spec: JobSpecModel, step: int, groups: Sequence[batch_pb2.BatchGroup]
) -> list[Path]:
    """Write the step's sampled trajectories; returns their paths."""
    folder = step_dir(log_dir, spec.experiment, step)
    written = []
    for entry in groups:
        for index, trajectory in enumerate(entry.group.trajectories):
            if not sampled(spec.log_sample_rate, job.id, step, entry.group_id, index):
                continue
            version = (
                trajectory.final_policy_version
                if trajectory.HasField("final_policy_version")
                # The policy that sampled this step's rollouts (after an SFT phase's
                # checkpoint, when the job had one).
                else step - 1 + (job.sft.checkpoint_step if job.sft.done else 0)
            )
            metadata = {
                "step": step,
                "policy_version": version,
                "job_id": job.id,
                "experiment": spec.experiment,
                "config_hash": job.config_hash,
                "group_id": entry.group_id,
            }
            record = trajlog.record(trajectory, metadata)
            record["metadata"].setdefault("scenario_id", "")
            written.append(trajlog.write(folder, f"{entry.group_id}-{index}", record))
    return written


async def write_step_async(
    log_dir: str, job: pb.Job, spec: JobSpecModel, step: int, groups: Sequence[batch_pb2.BatchGroup]
) -> None:
    """Never fails a step: a full disk loses samples, not training."""
    if spec.log_sample_rate <= 0:
        return
    try:
        paths = await asyncio.to_thread(write_step, log_dir, job, spec, step, groups)
        log.info("step %d: wrote %d sampled trajectories", step, len(paths))
    except OSError:
        log.warning("could not write sampled trajectories of step %d", step, exc_info=True)
