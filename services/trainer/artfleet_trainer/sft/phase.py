"""A job's SFT phase (the offline warm-start): before GRPO step 1, supervised
training on offline samples; GRPO then continues from the adapter it saved.

- Once per job: `Job.sft` records the phase (started, base step, done, the checkpoint it
  saved). A restart during the phase runs it again from the base step's adapter (nothing
  of a half-finished phase is saved); a restart after its checkpoint was saved, even
  before `done` was recorded, finds that checkpoint and never runs it again.
- Step numbering: the SFT adapter is a checkpoint like a step's (the next one, as ART's
  LocalBackend saves it), so GRPO step s is checkpoint `s + offset(job)`.
- Progress: one EVENT_KIND_SFT event per batch (loss, learning rate, grad norm, epoch) and
  one when done (per-epoch mean losses, the checkpoint), Prometheus gauges below, and ART's
  `model.log` history at the SFT checkpoint.

No torch here: the servicer imports this module to validate at submit.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import defaultdict
from typing import Any, cast

from prometheus_client import Counter, Gauge

from artfleet.contracts.art_types import art
from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import JobSpecModel
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer import metrics
from artfleet_trainer.backends import TrainerBackend
from artfleet_trainer.jobs.store import JobStore
from artfleet_trainer.sft.data import SftSample, describe, epoch_order, load_samples

log = logging.getLogger(__name__)

SFT_LOSS = Gauge(
    "artfleet_sft_loss", "Mean cross-entropy per assistant token of the last SFT batch"
)
SFT_LEARNING_RATE = Gauge("artfleet_sft_learning_rate", "Learning rate of the last SFT batch")
SFT_PROGRESS = Gauge("artfleet_sft_progress", "Share of the SFT phase's batches trained (0..1)")
SFT_EPOCH = Gauge("artfleet_sft_epoch", "Epoch of the last SFT batch (1-based)")
SFT_BATCHES = Counter("artfleet_sft_batches_total", "SFT batches trained (optimizer steps)")
SFT_SKIPPED = Counter(
    "artfleet_sft_samples_skipped_total", "Offline records left out of SFT, by reason", ["reason"]
)

# What ART's LocalBackend cannot do with an SFT phase (refused at submit, by name).
ART_UNSUPPORTED = {
    "max_length": "LocalBackend drops samples longer than the model's max_seq_length; "
    "set max_seq_length instead",
}


def check_spec(spec: JobSpecModel) -> None:
    """At submit: InvalidArgument naming `sft.<field>` the job's backend cannot honour, or
    `sft.data_path` when the file is missing, has bad records the job does not skip
    (`skip_bad_records`) or holds no usable sample."""
    if spec.sft is None:
        return
    if spec.backend == "art":
        for name, why in ART_UNSUPPORTED.items():
            if name in spec.sft.model_fields_set and getattr(spec.sft, name):
                raise InvalidArgument(f"not supported by the art backend: {why}", f"sft.{name}")
    load_samples(spec.sft, skip_bad_records=spec.skip_bad_records)


def offset(job: pb.Job) -> int:
    """Checkpoints before GRPO step 1: the SFT adapter's step once the phase is done."""
    return job.sft.checkpoint_step if job.sft.done else 0


def to_trajectories(samples: list[SftSample]) -> list[art.Trajectory]:
    # Plain OpenAI message dicts, as ART's own SFT files hold them (typed loosely: ART
    # declares its TypedDict unions).
    return [
        art.Trajectory(
            messages_and_choices=cast(Any, list(s.messages)), tools=cast(Any, s.tools), reward=0.0
        )
        for s in samples
    ]


class SftPhase:
    def __init__(self, store: JobStore, backend: TrainerBackend) -> None:
        self._store = store
        self._backend = backend

    async def run(self, job: pb.Job, spec: JobSpecModel, model: Any) -> None:
        """Runs the phase unless the job has none or it is done (also across restarts)."""
        if spec.sft is None or job.sft.done:
            return
        current = await self._backend.current_step(model)
        if job.sft.started and current > job.sft.base_step:
            log.info("job %s: SFT checkpoint %d found; not training it again", job.id, current)
            await self._finish(job, spec, current)
            return
        # Bad records were refused at submit unless the job skips them; a job queued
        # before that check existed (or a file changed since) trains on the good ones.
        data = await asyncio.to_thread(load_samples, spec.sft)
        log.info("job %s: SFT on %s", job.id, describe(data))
        for reason, n in data.skipped.items():
            SFT_SKIPPED.labels(reason).inc(n)
        job.sft.Clear()
        job.sft.started, job.sft.base_step, job.sft.samples = True, current, len(data.samples)
        job.sft.skipped.update(data.skipped)
        await self._store.save(job)
        started = time.monotonic()
        metrics.TRAINING.inc()  # the model is busy training, as during a GRPO step
        try:
            epoch_losses = await self._train(job, spec, model, data.samples)
        finally:
            metrics.TRAINING.dec()
        job.sft.epoch_losses.extend(epoch_losses)
        job.sft.seconds = time.monotonic() - started
        await self._finish(job, spec, await self._backend.current_step(model))
        await _log_history(model, job)

    async def _train(
        self, job: pb.Job, spec: JobSpecModel, model: Any, samples: list[SftSample]
    ) -> list[float]:
        assert spec.sft is not None
        sft = spec.sft
        ordered = epoch_order(samples, sft, spec.seed)
        batches = math.ceil(len(ordered) / sft.batch_size)
        per_epoch: dict[int, list[float]] = defaultdict(list)
        batch = 0
        async for batch_metrics in self._backend.train_sft(
            model,
            to_trajectories(ordered),
            learning_rate=sft.learning_rate,
            batch_size=sft.batch_size,
            max_length=sft.max_length,
        ):
            batch += 1
            epoch = min((batch - 1) * sft.batch_size // len(samples) + 1, sft.epochs)
            progress = pb.SftProgress(
                epoch=epoch,
                epochs=sft.epochs,
                batch=batch,
                batches=batches,
                loss=float(batch_metrics.get("loss/train", math.nan)),
                learning_rate=float(batch_metrics.get("loss/learning_rate", sft.learning_rate)),
                grad_norm=float(batch_metrics.get("loss/grad_norm", math.nan)),
            )
            per_epoch[epoch].append(progress.loss)
            _observe(progress)
            await self._emit(job, spec, progress)
        job.sft.batches = batch
        return [_mean(per_epoch[e]) for e in sorted(per_epoch)]

    async def _finish(self, job: pb.Job, spec: JobSpecModel, checkpoint_step: int) -> None:
        job.sft.done = True
        job.sft.checkpoint_step = checkpoint_step
        await self._store.save(job)
        done = pb.SftProgress(
            done=True,
            checkpoint_step=checkpoint_step,
            epochs=spec.sft.epochs if spec.sft else 0,
            batches=job.sft.batches,
            batch=job.sft.batches,
            epoch_losses=job.sft.epoch_losses,
        )
        await self._emit(job, spec, done)
        losses = ", ".join(f"{v:.4f}" for v in job.sft.epoch_losses) or "-"
        log.info(
            "job %s: SFT done, checkpoint %d (epoch losses %s)", job.id, checkpoint_step, losses
        )

    async def _emit(self, job: pb.Job, spec: JobSpecModel, progress: pb.SftProgress) -> None:
        event = pb.ProgressEvent(
            kind=pb.EVENT_KIND_SFT, total_steps=spec.steps, state=pb.JOB_STATE_RUNNING
        )
        event.sft.CopyFrom(progress)
        await self._store.emit(job.id, event)


def _observe(progress: pb.SftProgress) -> None:
    SFT_LOSS.set(progress.loss)
    SFT_LEARNING_RATE.set(progress.learning_rate)
    SFT_EPOCH.set(progress.epoch)
    SFT_PROGRESS.set(progress.batch / max(progress.batches, 1))
    SFT_BATCHES.inc()


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


async def _log_history(model: Any, job: pb.Job) -> None:
    """ART's own history (as `model.train_sft` logs it) at the SFT checkpoint."""
    history = {f"sft/epoch_{i + 1}_loss": v for i, v in enumerate(job.sft.epoch_losses)}
    history["sft/samples"] = float(job.sft.samples)
    history["sft/seconds"] = job.sft.seconds
    try:
        await model.log(None, split="train", metrics=history, step=job.sft.checkpoint_step)
    except Exception:
        log.warning("ART's model.log failed for the SFT phase", exc_info=True)
