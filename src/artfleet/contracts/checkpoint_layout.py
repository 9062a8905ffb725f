"""Where checkpoints live on disk (ART's layout), for every reader: the trainer writes it,
the inference service serves from it.

    <art path>/<project>/models/<name>/checkpoints/<step:04d>/adapter_config.json (+ weights)
    <art path>/<project>/models/<name>/checkpoints/<step:04d>/config.json (a full fine-tune)
    <art path>/<project>/models/<name>/best.json   {"step": 3, "metric": "pass_at_k", ...}

A LoRA checkpoint is a peft adapter folder (+ `optimizer.pt`); a full fine-tune's
(`finetune: full`) is a whole Hugging Face model folder (`config.json`, `model.safetensors`,
the tokenizer; loadable by vLLM and transformers as it is) and its optimizer state
sharded by `torch.distributed.checkpoint` in `optimizer/`.

A step counts once its adapter config (or model config) is there: the trainer writes a
checkpoint into a hidden folder and renames it into place, so a step folder is whole or
absent. `best.json` is the checkpoint the job's `keep_best_metric` ranks first (the
trainer rewrites it after each step), so every reader resolves `name@best` alike.

A model reference is `name` (its latest checkpoint), `name@<step>`, `name@latest` or
`name@best`; `parse_model_name` and `resolve_step` are the one reading of it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Literal

ADAPTER_CONFIG = "adapter_config.json"
MODEL_CONFIG = "config.json"  # a full fine-tune's checkpoint: a whole model folder
OPTIMIZER_DCP = "optimizer"  # its optimizer state: a torch.distributed.checkpoint folder
BEST_FILE = "best.json"
# A model name as served and looked up: no path parts, so a request cannot name a path.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
LATEST: Literal["latest"] = "latest"
BEST: Literal["best"] = "best"
# What follows `@`: a step number, an alias, or None for a plain name (its latest).
StepRef = int | Literal["latest", "best"] | None
REF_FORMS = "name, name@<step>, name@latest or name@best"


class ModelRefError(ValueError):
    """`name@x` where x is neither a step number nor an alias."""


def parse_model_name(requested: str) -> tuple[str, StepRef]:
    """Split `name@step` into (name, step); a plain name gives step None (the latest),
    `name@latest` LATEST and `name@best` BEST. Any other `@` suffix: ModelRefError."""
    name, sep, step = requested.rpartition("@")
    if not sep or not name:
        return requested, None
    if step.isdigit():
        return name, int(step)
    if step == LATEST:
        return name, LATEST
    if step == BEST:
        return name, BEST
    raise ModelRefError(f"{requested!r}: {step!r} is not a step number or an alias ({REF_FORMS})")


def is_latest(step: StepRef) -> bool:
    return step is None or step == LATEST


def describe_missing(name: str, step: StepRef) -> str:
    """Why `name@step` names no checkpoint, for error messages."""
    if step == BEST:
        return (
            f"model {name!r} has no checkpoint marked best (a job marks one when it sets "
            "keep_best_metric and has been evaluated)"
        )
    if is_latest(step):
        return f"model {name!r} has no checkpoint"
    return f"model {name!r} has no checkpoint {step}"


def model_dir(art_path: str | Path, project: str, name: str) -> Path:
    return Path(art_path) / project / "models" / name


def step_dir(model_dir: Path, step: int) -> Path:
    return model_dir / "checkpoints" / f"{step:04d}"


def folder_bytes(folder: Path) -> int:
    """Bytes of every file under `folder` (a checkpoint's size); 0 when there is none."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def is_full_checkpoint(folder: Path) -> bool:
    """A full fine-tune's checkpoint (a whole model folder), not a LoRA adapter."""
    return (folder / MODEL_CONFIG).is_file() and not (folder / ADAPTER_CONFIG).is_file()


def is_checkpoint(folder: Path) -> bool:
    """A whole checkpoint folder: an adapter's, or a full fine-tune's."""
    return (folder / ADAPTER_CONFIG).is_file() or is_full_checkpoint(folder)


def checkpoint_steps(model_dir: Path) -> list[int]:
    """Steps with a saved checkpoint (adapter or full model), ascending."""
    root = model_dir / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(
        int(entry.name) for entry in root.iterdir() if entry.name.isdigit() and is_checkpoint(entry)
    )


def delete_steps_after(model_dir: Path, step: int) -> list[int]:
    """Delete the checkpoints past `step`; returns their steps."""
    later = [s for s in checkpoint_steps(model_dir) if s > step]
    for s in later:
        shutil.rmtree(step_dir(model_dir, s), ignore_errors=True)
    return later


def write_best(model_dir: Path, step: int, metric: str, value: float) -> None:
    """Mark checkpoint `step` best (atomically: a reader sees the old mark or the new)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    staging = model_dir / f".{BEST_FILE}.tmp"
    staging.write_text(json.dumps({"step": step, "metric": metric, "value": value}))
    os.replace(staging, model_dir / BEST_FILE)


def marked_best(model_dir: Path) -> int | None:
    """The step marked best, or None (none marked, or an unreadable mark)."""
    try:
        step = json.loads((model_dir / BEST_FILE).read_text())["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def resolve_step(model_dir: Path, step: StepRef) -> int | None:
    """The saved step that `step` names in `model_dir`, or None when it is not there."""
    steps = checkpoint_steps(model_dir)
    if is_latest(step):
        return steps[-1] if steps else None
    want = marked_best(model_dir) if step == BEST else step
    return want if want in steps else None


def find_checkpoint(
    art_path: Path,
    name: str,
    step: StepRef,
    accept: Callable[[Path], bool] = lambda model_dir: True,
) -> tuple[int, Path] | None:
    """A checkpoint of the model `name` under `art_path` (any project): (step, folder) of
    what `step` names (resolve_step); only model folders `accept` allows; else None."""
    if not MODEL_NAME.match(name):
        return None
    for model_dir in sorted(Path(art_path).glob(f"*/models/{name}")):
        want = resolve_step(model_dir, step)
        if want is not None and accept(model_dir):
            return want, step_dir(model_dir, want)
    return None


def served_name_of(path: str | Path) -> str | None:
    """The served name of a checkpoint folder in this layout: `.../models/<name>/
    checkpoints/<step>` → `name@step`, `.../models/<name>` → `name` (its latest); else None."""
    parts = Path(path).parts
    at_step = len(parts) >= 4 and parts[-2] == "checkpoints" and parts[-1].isdigit()
    if at_step and parts[-4] == "models" and MODEL_NAME.match(parts[-3]):
        return f"{parts[-3]}@{int(parts[-1])}"
    if len(parts) >= 2 and parts[-2] == "models" and MODEL_NAME.match(parts[-1]):
        return parts[-1]
    return None
