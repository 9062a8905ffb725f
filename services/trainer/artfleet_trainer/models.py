"""`Models*` RPCs: each job's model (ART name `<spec.name>-<job id>`) and its LoRA
checkpoints under the trainer's ART path: list, show, delete, export.

A model whose job is queued, running or cancelling is not deleted (FAILED_PRECONDITION
saying which job uses it): its runner reads and writes those checkpoints.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from artfleet import checkpoint_layout
from artfleet.errors import FailedPrecondition, InvalidArgument, NotFound
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2
from artfleet_trainer import retention
from artfleet_trainer.store import ACTIVE, JobStore

CHUNK_BYTES = 1 << 20
# Training state, not part of an adapter a person loads.
NOT_EXPORTED = frozenset({"optimizer.pt"})


def model_name(job: pb.Job) -> str:
    return f"{job.spec.name}-{job.id}"


def parse_ref(ref: str, field: str = "model") -> tuple[str, int | None]:
    """`name` or `name@step`."""
    name, _, step = ref.partition("@")
    if not name:
        raise InvalidArgument("is required (a model name, or name@step)", field)
    if not step:
        return name, None
    if not step.isdigit():
        raise InvalidArgument(f"step {step!r} is not a number (name@step)", field)
    return name, int(step)


class ModelCatalog:
    def __init__(self, store: JobStore, art_path: str) -> None:
        self._store = store
        self._art_path = art_path

    def _dir(self, job: pb.Job) -> Path:
        return checkpoint_layout.model_dir(self._art_path, job.spec.project, model_name(job))

    def info(self, job: pb.Job) -> trainer_pb2.ModelInfo:
        directory = self._dir(job)
        steps = checkpoint_layout.checkpoint_steps(directory)
        metric = job.spec.keep_best_metric
        best = retention.best_step(job.evals, metric, steps) if metric else None
        info = trainer_pb2.ModelInfo(
            name=model_name(job),
            project=job.spec.project,
            job_id=job.id,
            job_state=job.state,
            experiment=job.spec.experiment or "default",
            config_hash=job.config_hash,
            base_model=job.spec.base_model,
            latest_step=steps[-1] if steps else 0,
            path=str(directory),
        )
        for step in steps:
            size = _bytes(directory / "checkpoints" / f"{step:04d}")
            info.checkpoints.append(
                trainer_pb2.ModelCheckpoint(step=step, bytes=size, best=step == best)
            )
        return info

    async def models(self, experiment: str = "") -> list[trainer_pb2.ModelInfo]:
        jobs = await self._store.list(experiment=experiment)
        return [self.info(job) for job in jobs if self._dir(job).is_dir()]

    async def _job(self, name: str) -> pb.Job:
        job_id = name.rpartition("-")[2]
        try:
            job = await self._store.get(job_id)
        except NotFound:
            raise NotFound(f"no model named {name!r}") from None
        if model_name(job) != name or not self._dir(job).is_dir():
            raise NotFound(f"no model named {name!r}")
        return job

    async def get(self, ref: str) -> trainer_pb2.ModelInfo:
        name, step = parse_ref(ref)
        info = self.info(await self._job(name))
        if step is not None and step not in {c.step for c in info.checkpoints}:
            raise NotFound(f"model {name!r} has no checkpoint {step}")
        return info

    async def delete(self, ref: str) -> list[int]:
        name, step = parse_ref(ref)
        job = await self._job(name)
        if job.state in ACTIVE:
            state = pb.JobState.Name(job.state).removeprefix("JOB_STATE_").lower()
            raise FailedPrecondition(
                f"model {name!r} is used by job {job.id}, which is {state}; "
                "cancel the job (and let it stop) before deleting its model"
            )
        directory = self._dir(job)
        steps = checkpoint_layout.checkpoint_steps(directory)
        if step is None:
            shutil.rmtree(directory)
            return steps
        if step not in steps:
            raise NotFound(f"model {name!r} has no checkpoint {step}")
        shutil.rmtree(directory / "checkpoints" / f"{step:04d}")
        return [step]

    async def export(self, ref: str) -> AsyncIterator[trainer_pb2.ModelsExportChunk]:
        name, step = parse_ref(ref)
        job = await self._job(name)
        steps = checkpoint_layout.checkpoint_steps(self._dir(job))
        chosen = steps[-1] if step is None and steps else step
        if chosen is None or chosen not in steps:
            raise NotFound(f"model {name!r} has no checkpoint {step if step is not None else ''}")
        folder = self._dir(job) / "checkpoints" / f"{chosen:04d}"
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            if path.name in NOT_EXPORTED:
                continue
            for data in _chunks(path):
                yield trainer_pb2.ModelsExportChunk(
                    file=str(path.relative_to(folder)), data=data, step=chosen
                )


def _chunks(path: Path) -> Iterator[bytes]:
    """The file in chunks; an empty file is one empty chunk, so the exporter creates it."""
    with path.open("rb") as handle:
        data = handle.read(CHUNK_BYTES)
        yield data
        while data := handle.read(CHUNK_BYTES):
            yield data


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
