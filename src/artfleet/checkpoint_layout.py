"""Where checkpoints live on disk (ART's layout), for every reader: the trainer writes it,
the inference service serves from it.

    <art path>/<project>/models/<name>/checkpoints/<step:04d>/adapter_config.json (+ weights)

A step counts once its adapter config is there: the trainer writes a checkpoint into a
hidden folder and renames it into place, so a step folder is whole or absent.
"""

from __future__ import annotations

from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"


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
