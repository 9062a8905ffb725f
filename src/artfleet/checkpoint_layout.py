"""Where checkpoints live on disk (ART's layout), for every reader: the trainer writes it,
the inference service serves from it.

    <art path>/<project>/models/<name>/checkpoints/<step:04d>/adapter_config.json (+ weights)

A step counts once its adapter config is there: the trainer writes a checkpoint into a
hidden folder and renames it into place, so a step folder is whole or absent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
# A model name as served and looked up: no path parts, so a request cannot name a path.
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


def parse_model_name(requested: str) -> tuple[str, int | None]:
    """Split `name@step` into (name, step); a plain name gives step None (the latest)."""
    name, sep, step = requested.rpartition("@")
    if sep and name and step.isdigit():
        return name, int(step)
    return requested, None


def model_dir(art_path: str | Path, project: str, name: str) -> Path:
    return Path(art_path) / project / "models" / name


def step_dir(model_dir: Path, step: int) -> Path:
    return model_dir / "checkpoints" / f"{step:04d}"


def checkpoint_steps(model_dir: Path) -> list[int]:
    """Steps with a saved adapter, ascending."""
    root = model_dir / "checkpoints"
    if not root.is_dir():
        return []
    return sorted(
        int(entry.name)
        for entry in root.iterdir()
        if entry.name.isdigit() and (entry / ADAPTER_CONFIG).is_file()
    )


def find_checkpoint(
    art_path: Path,
    name: str,
    step: int | None,
    accept: Callable[[Path], bool] = lambda model_dir: True,
) -> tuple[int, Path] | None:
    """A checkpoint of the model `name` under `art_path` (any project): (step, folder) of
    `step`, or of the latest when None; only model folders `accept` allows; else None."""
    if not MODEL_NAME.match(name):
        return None
    for model_dir in sorted(Path(art_path).glob(f"*/models/{name}")):
        steps = checkpoint_steps(model_dir)
        want = steps[-1] if step is None and steps else step
        if want is not None and want in steps and accept(model_dir):
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
