"""`models list` shows a Tinker API run as what it is: its run id, base model and LoRA
rank (ModelInfo.tinker_run), not a job's model with an unspecified state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from artfleet_trainer.jobs.models import ModelCatalog
from artfleet_trainer.tinker_api.runs import RunRecord, Runs


class NoJobs:
    """The job store's listing, with no job (ModelCatalog reads only `list` here)."""

    async def list(self, experiment: str = "") -> list[Any]:
        return []


async def test_a_tinker_run_lists_its_id_base_and_rank(tmp_path: Path) -> None:
    art = str(tmp_path / "art")
    Runs(art).write(RunRecord("abc:train:0", "/models/smollm2", 8))
    catalog = ModelCatalog(NoJobs(), art)  # type: ignore[arg-type]
    [model] = await catalog.models("tinker")
    assert model.name == "abc-train-0" and model.experiment == "tinker"
    assert model.base_model == "/models/smollm2"
    assert model.HasField("tinker_run") and not model.job_id
    assert (model.tinker_run.training_run_id, model.tinker_run.lora_rank) == ("abc:train:0", 8)
    assert list(model.checkpoints) == []  # nothing saved, nothing listed
