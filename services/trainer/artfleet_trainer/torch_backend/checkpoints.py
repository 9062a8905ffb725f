"""Checkpoints in ART's layout: `{path}/{project}/models/{name}/checkpoints/{step:04d}/`.

A LoRA checkpoint holds the peft adapter (`adapter_model.safetensors`, `adapter_config.json`) and
the optimizer state (`optimizer.pt`, as ART's Unsloth service names it), so a restarted
trainer resumes where it stopped; a full fine-tune's is a whole model folder
(full_model.py). A checkpoint is written into a hidden temporary folder
and renamed into place: a crash leaves no half-written step that would look like the
latest one.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from artfleet.contracts.checkpoint_layout import checkpoint_steps
from artfleet_trainer.backends.art_compat import art

log = logging.getLogger(__name__)

OPTIMIZER_FILE = "optimizer.pt"


def model_dir(art_path: str, model: art.Model) -> Path:
    return Path(art.utils.output_dirs.get_model_dir(model=model, art_path=art_path))


def checkpoint_dir(model_output_dir: Path, step: int) -> Path:
    return Path(art.utils.output_dirs.get_step_checkpoint_dir(str(model_output_dir), step))


def latest_step(model_output_dir: Path) -> int:
    steps = checkpoint_steps(model_output_dir)
    return steps[-1] if steps else 0


def save_checkpoint(
    peft_model: Any,
    model_output_dir: Path,
    step: int,
    optimizer_state: dict[str, Any] | None = None,
) -> Path:
    """Write the adapter (and optimizer state) as checkpoint `step`, atomically."""

    def write(staging: Path) -> None:
        peft_model.save_pretrained(str(staging))
        if optimizer_state is not None:
            torch.save(optimizer_state, staging / OPTIMIZER_FILE)

    return save_staged(model_output_dir, step, write)


def save_staged(model_output_dir: Path, step: int, write: Callable[[Path], None]) -> Path:
    """Checkpoint `step`, atomically: `write` fills a hidden staging folder, which is then
    renamed into place."""
    target = checkpoint_dir(model_output_dir, step)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{step:04d}-", dir=target.parent))
    try:
        write(staging)
        staging.chmod(0o755)
        if target.exists():  # a step written before a crash, never served: replace it
            shutil.rmtree(target)
        os.rename(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log.info("saved checkpoint %s", target)
    return target


def load_optimizer_state(checkpoint: Path) -> dict[str, Any] | None:
    path = checkpoint / OPTIMIZER_FILE
    if not path.is_file():
        return None
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def delete_checkpoints(model_output_dir: Path, steps_to_keep: set[int]) -> list[int]:
    """Delete every checkpoint whose step is not in `steps_to_keep`; return those deleted."""
    deleted = []
    for step in checkpoint_steps(model_output_dir):
        if step not in steps_to_keep:
            shutil.rmtree(checkpoint_dir(model_output_dir, step), ignore_errors=True)
            deleted.append(step)
    return deleted
