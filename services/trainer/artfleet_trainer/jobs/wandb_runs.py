"""W&B, optional: with `WANDB_API_KEY` in the trainer's environment, ART's own
`model.log` (train steps, in-training evals as `val/...`) reaches W&B; without it nothing
W&B happens (`artfleet.contracts.art_types` then sets `WANDB_MODE=disabled`).

ART 0.5.18 starts a job's run lazily on its first `model.log` (project = the job's
project, name and id = the model name) and never finishes it: a trainer runs many jobs,
so the run is finished here when the job ends (offline mode writes its files then). The
key is read by wandb from the environment and never passed, stored or logged by us.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from artfleet.contracts.art_types import art
from artfleet.specs.job import JobSpecModel
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs import experiment

log = logging.getLogger(__name__)

_models: dict[str, art.Model] = {}  # job id -> its model, while it runs


def enabled() -> bool:
    return bool(os.environ.get("WANDB_API_KEY")) and os.environ.get("WANDB_MODE") != "disabled"


async def attach(job: pb.Job, spec: JobSpecModel, model: art.Model) -> None:
    """The job's identity on its W&B run, which starts here, in a thread: ART would start
    it inside the first `model.log`, and wandb.init blocks for seconds (it spawns its
    service process), which on the event loop stalls the trainer's RPCs and leases."""
    if not enabled():
        return
    config = experiment.model_config(job, spec)
    model.update_wandb_config(
        {"experiment": config.experiment, "config_hash": config.config_hash, "job_id": job.id}
    )
    _models[job.id] = model
    try:
        await asyncio.to_thread(model._get_wandb_run)  # ART 0.5.18's own run, as it makes it
    except Exception:  # W&B trouble never fails a job; ART's model.log tries again
        log.warning("job %s: starting the W&B run failed", job.id, exc_info=True)
        return
    log.info(
        "job %s: ART logs to W&B project %s, run %s (mode %s)",
        job.id,
        model.project,
        model.name,
        os.environ.get("WANDB_MODE", "online"),
    )


async def finish(job_id: str) -> None:
    """Finishes the job's W&B run, if ART started one (it never does so itself)."""
    model = _models.pop(job_id, None)
    run: Any = getattr(model, "_wandb_run", None)  # ART 0.5.18 keeps its run there
    if run is None:
        return
    try:
        await asyncio.to_thread(run.finish)
    except Exception:  # W&B trouble never fails a job
        log.warning("job %s: finishing the W&B run failed", job_id, exc_info=True)
    with contextlib.suppress(AttributeError, ValueError):
        object.__setattr__(model, "_wandb_run", None)
