"""Experiment identity on a running job: ART's model config, a metrics label set, logs.

The config hash is computed once, at submit (`artfleet.specs.job.config_hash`), and
recorded on the Job; this module carries it to where a person later looks for it.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel

from artfleet.specs.job import JobSpecModel, config_hash
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer import metrics

log = logging.getLogger(__name__)


class ExperimentConfig(BaseModel):
    """ART's `model.config` of a job's TrainableModel (JSON: ART checks it serializes)."""

    experiment: str
    config_hash: str
    job_id: str
    spec: dict[str, Any]


def job_hash(job: pb.Job, spec: JobSpecModel) -> str:
    """The recorded hash; jobs stored before hashes existed get theirs computed now."""
    return job.config_hash or config_hash(spec)


def model_config(job: pb.Job, spec: JobSpecModel) -> ExperimentConfig:
    return ExperimentConfig(
        experiment=spec.experiment,
        config_hash=job_hash(job, spec),
        job_id=job.id,
        spec=spec.model_dump(mode="json"),
    )


_labelled: dict[str, tuple[str, str, str]] = {}


def started(job: pb.Job, spec: JobSpecModel) -> None:
    """Log and label the job's identity (one info series per running job)."""
    labels = (job.id, spec.experiment, job_hash(job, spec))
    log.info("job %s: experiment %s, config %s, model %s", *labels, spec.name)
    metrics.JOB_INFO.labels(*labels).set(1)
    _labelled[job.id] = labels


def ended(job_id: str) -> None:
    labels = _labelled.pop(job_id, None)
    if labels is not None:
        metrics.JOB_INFO.remove(*labels)
