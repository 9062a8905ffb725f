"""`Models*` RPCs: each job's model (ART name `<spec.name>-<job id>`) and its checkpoints
(LoRA adapters or, `finetune: full`, whole models) under the trainer's ART path: list, show,
delete, prune, export.

A model whose job is queued, running or cancelling is not deleted (FAILED_PRECONDITION
saying which job uses it): its runner reads and writes those checkpoints. Pruning is
allowed then, by retention's rule (never the latest or served checkpoint, never the best),
as retention itself deletes during a run.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from artfleet.contracts import checkpoint_layout
from artfleet.contracts.checkpoint_layout import StepRef
from artfleet.contracts.errors import FailedPrecondition, InvalidArgument, NotFound
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2
from artfleet_trainer.jobs import retention
from artfleet_trainer.jobs.store import ACTIVE, JobStore
from artfleet_trainer.tinker_api.runs import PROJECT as TINKER_EXPERIMENT
from artfleet_trainer.tinker_api.runs import RunRecord, Runs, run_name

CHUNK_BYTES = 1 << 20
# Training state, not part of an adapter or model a person loads: a LoRA checkpoint's
# optimizer file, a full fine-tune's optimizer folder (sharded by torch.distributed.checkpoint).
NOT_EXPORTED = frozenset({"optimizer.pt"})
NOT_EXPORTED_DIRS = frozenset({checkpoint_layout.OPTIMIZER_DCP})


def model_name(job: pb.Job) -> str:
    return f"{job.spec.name}-{job.id}"


def parse_ref(ref: str, field: str = "model") -> tuple[str, StepRef]:
    """A model reference (checkpoint_layout.REF_FORMS)."""
    if not ref.partition("@")[0]:
        raise InvalidArgument(f"is required ({checkpoint_layout.REF_FORMS})", field)
    try:
        return checkpoint_layout.parse_model_name(ref)
    except checkpoint_layout.ModelRefError as exc:
        raise InvalidArgument(str(exc), field) from None


class ModelCatalog:
    def __init__(self, store: JobStore, art_path: str) -> None:
        self._store = store
        self._art_path = art_path
        self._runs = Runs(art_path)  # the Tinker API's training runs

    def _dir(self, job: pb.Job) -> Path:
        return checkpoint_layout.model_dir(self._art_path, job.spec.project, model_name(job))

    def info(self, job: pb.Job) -> trainer_pb2.ModelInfo:
        directory = self._dir(job)
        info = trainer_pb2.ModelInfo(
            name=model_name(job),
            project=job.spec.project,
            job_id=job.id,
            job_state=job.state,
            experiment=job.spec.experiment or "default",
            config_hash=job.config_hash,
            base_model=job.spec.base_model,
        )
        return _with_checkpoints(info, directory, checkpoint_layout.marked_best(directory))

    async def models(self, experiment: str = "") -> list[trainer_pb2.ModelInfo]:
        jobs = await self._store.list(experiment=experiment)
        listed = [self.info(job) for job in jobs if self._dir(job).is_dir()]
        if experiment in ("", TINKER_EXPERIMENT):
            listed += [self._tinker_info(run) for run in self._runs.all()]
        return listed

    def _tinker_info(self, run: RunRecord) -> trainer_pb2.ModelInfo:
        """A Tinker API training run, listed as a model of the experiment `tinker`."""
        info = trainer_pb2.ModelInfo(
            name=run_name(run.training_run_id),
            project=TINKER_EXPERIMENT,
            experiment=TINKER_EXPERIMENT,
            base_model=run.base_model,
            tinker_run=trainer_pb2.TinkerRun(
                training_run_id=run.training_run_id, lora_rank=run.lora_rank
            ),
        )
        return _with_checkpoints(info, self._runs.model_dir(run.training_run_id))

    async def _job(self, name: str) -> pb.Job:
        job_id = name.rpartition("-")[2]
        try:
            job = await self._store.get(job_id)
        except NotFound:
            raise NotFound(f"no model named {name!r}") from None
        if model_name(job) != name or not self._dir(job).is_dir():
            raise NotFound(f"no model named {name!r}")
        return job

    def _step(self, job: pb.Job, name: str, step: StepRef) -> int:
        """The saved step `step` names, else NotFound saying why."""
        found = checkpoint_layout.resolve_step(self._dir(job), step)
        if found is None:
            raise NotFound(checkpoint_layout.describe_missing(name, step))
        return found

    async def get(self, ref: str) -> trainer_pb2.ModelInfo:
        name, step = parse_ref(ref)
        job = await self._job(name)
        if step is not None:
            self._step(job, name, step)
        return self.info(job)

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
        if step is None:  # a plain name: the whole model
            steps = checkpoint_layout.checkpoint_steps(directory)
            shutil.rmtree(directory)
            return steps
        chosen = self._step(job, name, step)
        shutil.rmtree(checkpoint_layout.step_dir(directory, chosen))
        return [chosen]

    async def prune(self, name: str, keep: int, dry_run: bool) -> trainer_pb2.ModelsPruneResponse:
        """Delete all but the newest `keep` checkpoints of `name` (retention.keep_reasons)."""
        if keep < 0:
            raise InvalidArgument("must be >= 0", "keep")
        model, step = parse_ref(name)
        if step is not None:
            raise InvalidArgument(
                f"{name!r}: prune takes a model name; delete one checkpoint with "
                "`artfleet models delete name@step`",
                "model",
            )
        job = await self._job(model)
        directory = self._dir(job)
        steps = checkpoint_layout.checkpoint_steps(directory)
        in_use = _steps_in_use(job, steps) if job.state in ACTIVE else {}
        kept = retention.keep_reasons(steps, keep, checkpoint_layout.marked_best(directory), in_use)
        reply = trainer_pb2.ModelsPruneResponse(model=model, dry_run=dry_run)
        for step in steps:
            entry = trainer_pb2.PrunedCheckpoint(
                step=step,
                bytes=checkpoint_layout.folder_bytes(checkpoint_layout.step_dir(directory, step)),
                reason=kept.get(step, f"older than the newest {keep}"),
            )
            (reply.kept if step in kept else reply.deleted).append(entry)
        if not dry_run:
            gone = [c.step for c in reply.deleted]
            await asyncio.to_thread(retention.delete_steps, directory, gone)
        return reply

    async def export(self, ref: str) -> AsyncIterator[trainer_pb2.ModelsExportChunk]:
        name, step = parse_ref(ref)
        job = await self._job(name)
        chosen = self._step(job, name, step)
        folder = checkpoint_layout.step_dir(self._dir(job), chosen)
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            relative = path.relative_to(folder)
            if path.name in NOT_EXPORTED or relative.parts[0] in NOT_EXPORTED_DIRS:
                continue
            for data in _chunks(path):
                yield trainer_pb2.ModelsExportChunk(file=str(relative), data=data, step=chosen)


def _steps_in_use(job: pb.Job, steps: list[int]) -> dict[int, str]:
    """A queued or running job's latest checkpoint (it goes on from it) and the one its
    policy names (served to its rollouts until the next step is published)."""
    try:
        served = checkpoint_layout.parse_model_name(job.policy)[1]
    except checkpoint_layout.ModelRefError:
        served = None
    in_use = {step: "running job's latest" for step in steps[-1:]}
    if isinstance(served, int):
        in_use.setdefault(served, "served to the running job")
    return in_use


def _chunks(path: Path) -> Iterator[bytes]:
    """The file in chunks; an empty file is one empty chunk, so the exporter creates it."""
    with path.open("rb") as handle:
        data = handle.read(CHUNK_BYTES)
        yield data
        while data := handle.read(CHUNK_BYTES):
            yield data


def _with_checkpoints(
    info: trainer_pb2.ModelInfo, directory: Path, best: int | None = None
) -> trainer_pb2.ModelInfo:
    """`info` with its folder, its checkpoints (sizes; `best` marked) and the latest step."""
    steps = checkpoint_layout.checkpoint_steps(directory)
    info.path = str(directory)
    info.latest_step = steps[-1] if steps else 0
    for step in steps:
        size = checkpoint_layout.folder_bytes(checkpoint_layout.step_dir(directory, step))
        info.checkpoints.append(
            trainer_pb2.ModelCheckpoint(step=step, bytes=size, best=step == best)
        )
    return info
