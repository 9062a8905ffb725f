"""Training runs of the Tinker-compatible API on disk: what survives a trainer restart.

A run is a training client's model folder in the fleet's layout
(`{art_path}/tinker/models/{name}/`, checkpoints `checkpoints/{step:04d}/`), plus
`training_run.json`: the run's id, base model, LoRA rank, and each named save
(`weights/<name>` with optimizer state, `sampler_weights/<name>`) with the fleet step it
is. `tinker://<run>/<kind>/<name>` paths resolve through it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from artfleet.contracts import checkpoint_layout
from artfleet.contracts.errors import InvalidArgument, NotFound

INDEX_FILE = "training_run.json"
PROJECT = "tinker"
KINDS = {"weights": "training", "sampler_weights": "sampler"}


@dataclass
class SavedWeights:
    checkpoint_id: str  # "weights/<name>" or "sampler_weights/<name>"
    step: int
    time: float


@dataclass
class RunRecord:
    training_run_id: str
    base_model: str
    lora_rank: int
    user_metadata: dict[str, str] = field(default_factory=dict)
    created: float = field(default_factory=time.time)
    last_request_time: float = field(default_factory=time.time)
    saves: list[SavedWeights] = field(default_factory=list)

    def save_named(self, checkpoint_id: str) -> SavedWeights | None:
        return next((s for s in self.saves if s.checkpoint_id == checkpoint_id), None)

    def last(self, kind: str) -> SavedWeights | None:
        found = [s for s in self.saves if s.checkpoint_id.startswith(f"{kind}/")]
        return found[-1] if found else None


def run_name(training_run_id: str) -> str:
    """The fleet's model name of a run (`name@step` is what the serving engine serves)."""
    return training_run_id.replace(":", "-")


def tinker_path(training_run_id: str, checkpoint_id: str) -> str:
    return f"tinker://{training_run_id}/{checkpoint_id}"


def parse_path(path: str) -> tuple[str, str]:
    """`tinker://<run>/<kind>/<name>` as (run id, checkpoint id); InvalidArgument otherwise."""
    prefix = "tinker://"
    parts = path[len(prefix) :].split("/") if path.startswith(prefix) else []
    if len(parts) != 3 or parts[1] not in KINDS or not parts[0] or not parts[2]:
        raise InvalidArgument(
            f"{path!r} is not a path of saved weights (tinker://<run>/weights/<name> or "
            "tinker://<run>/sampler_weights/<name>)",
            "path",
        )
    return parts[0], f"{parts[1]}/{parts[2]}"


class Runs:
    def __init__(self, art_path: str) -> None:
        self._art_path = art_path
        self._root = checkpoint_layout.model_dir(art_path, PROJECT, "")

    def model_dir(self, training_run_id: str) -> Path:
        return checkpoint_layout.model_dir(self._art_path, PROJECT, run_name(training_run_id))

    def checkpoint_dir(self, training_run_id: str, step: int) -> Path:
        return checkpoint_layout.step_dir(self.model_dir(training_run_id), step)

    def write(self, record: RunRecord) -> None:
        folder = self.model_dir(record.training_run_id)
        folder.mkdir(parents=True, exist_ok=True)
        fd, staging = tempfile.mkstemp(prefix=".run-", dir=folder)
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(record), out)
        os.replace(staging, folder / INDEX_FILE)

    def get(self, training_run_id: str) -> RunRecord:
        path = self.model_dir(training_run_id) / INDEX_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise NotFound(f"no training run {training_run_id!r}") from None
        raw["saves"] = [SavedWeights(**s) for s in raw.get("saves", [])]
        return RunRecord(**raw)

    def all(self) -> list[RunRecord]:
        records: list[RunRecord] = []
        for index in sorted(self._root.glob(f"*/{INDEX_FILE}")):
            try:
                records.append(self.get(json.loads(index.read_text())["training_run_id"]))
            except (OSError, ValueError, KeyError, TypeError, NotFound):
                continue  # being written, or not ours
        return sorted(records, key=lambda r: r.created)

    def resolve(self, path: str) -> tuple[RunRecord, SavedWeights, Path]:
        """The run, the save and its checkpoint folder that `path` names."""
        run_id, checkpoint_id = parse_path(path)
        record = self.get(run_id)
        saved = record.save_named(checkpoint_id)
        folder = self.checkpoint_dir(run_id, saved.step) if saved else None
        if saved is None or folder is None or not folder.is_dir():
            raise NotFound(f"no saved weights {path!r}")
        return record, saved, folder

    def steps_on_disk(self, training_run_id: str) -> list[int]:
        return checkpoint_layout.checkpoint_steps(self.model_dir(training_run_id))
