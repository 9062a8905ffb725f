"""`models export` streams a checkpoint's files a person loads, not its training state: a
LoRA checkpoint's `optimizer.pt`, a full fine-tune's `optimizer/` folder (DCP shards)."""

from __future__ import annotations

from pathlib import Path

from artfleet.contracts import checkpoint_layout
from artfleet.specs.job import spec_to_proto, validate_spec
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs.models import ModelCatalog, model_name


class OneJob:
    """The job store's `get`, holding one job (export reads only that)."""

    def __init__(self, job: pb.Job) -> None:
        self._job = job

    async def get(self, job_id: str) -> pb.Job:
        assert job_id == self._job.id
        return self._job


def _checkpoint(art: Path, job: pb.Job, files: dict[str, bytes]) -> None:
    model = checkpoint_layout.model_dir(art, job.spec.project, model_name(job))
    folder = checkpoint_layout.step_dir(model, 1)
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


async def _exported(art: Path, job: pb.Job) -> dict[str, bytes]:
    catalog = ModelCatalog(OneJob(job), str(art))  # type: ignore[arg-type]
    files: dict[str, bytes] = {}
    async for chunk in catalog.export(f"{model_name(job)}@1"):
        files[chunk.file] = files.get(chunk.file, b"") + chunk.data
    return files


def _job(finetune: str) -> pb.Job:
    return pb.Job(id="j1", spec=spec_to_proto(validate_spec({"finetune": finetune})))


async def test_a_full_checkpoint_exports_its_model_without_the_optimizer_folder(
    tmp_path: Path,
) -> None:
    job = _job("full")
    optimizer = checkpoint_layout.OPTIMIZER_DCP
    _checkpoint(
        tmp_path,
        job,
        {
            "config.json": b"{}",
            "model.safetensors": b"weights",
            f"{optimizer}/__0_0.distcp": b"state",
            f"{optimizer}/.metadata": b"meta",
        },
    )
    assert await _exported(tmp_path, job) == {
        "config.json": b"{}",
        "model.safetensors": b"weights",
    }


async def test_a_lora_checkpoint_exports_its_adapter_without_optimizer_pt(
    tmp_path: Path,
) -> None:
    job = _job("lora")
    adapter = {"adapter_config.json": b"{}", "adapter_model.safetensors": b"lora"}
    _checkpoint(tmp_path, job, {**adapter, "optimizer.pt": b"state"})
    assert await _exported(tmp_path, job) == adapter
