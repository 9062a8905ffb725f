"""Which checkpoint or base model an evaluation's model name refers to (frozen.find): only
names the trainer wrote under its ART path, never a path a request makes up."""

from __future__ import annotations

import json
from pathlib import Path

from artfleet.contracts.checkpoint_layout import write_best
from artfleet_trainer.torch_serving.frozen import FrozenRef, find


def _model(art: Path, name: str, steps: list[int], base: str = "smollm2-135m-instruct") -> Path:
    folder = art / "proj" / "models" / name
    folder.mkdir(parents=True)
    (folder / "model.json").write_text(json.dumps({"name": name, "base_model": base}))
    for step in steps:
        checkpoint = folder / "checkpoints" / f"{step:04d}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "adapter_config.json").write_text("{}")
    (folder / "checkpoints" / "0009").mkdir()  # no adapter: not a checkpoint
    return folder


def test_a_step_the_latest_and_the_base_model(tmp_path: Path) -> None:
    folder = _model(tmp_path, "agent-j1", [0, 2, 5])
    checkpoint = folder / "checkpoints"
    base = "smollm2-135m-instruct"
    assert find(tmp_path, "agent-j1@2") == FrozenRef("agent-j1", 2, base, checkpoint / "0002")
    assert find(tmp_path, "agent-j1") == FrozenRef("agent-j1", 5, base, checkpoint / "0005")
    assert find(tmp_path, base) == FrozenRef(base, 0, base, None)
    assert find(tmp_path, f"{base}@0") == FrozenRef(base, 0, base, None)
    assert find(tmp_path, "agent-j1@latest") == FrozenRef("agent-j1", 5, base, checkpoint / "0005")


def test_best_is_the_step_its_job_marked(tmp_path: Path) -> None:
    folder = _model(tmp_path, "agent-j1", [0, 2, 5])
    assert find(tmp_path, "agent-j1@best") is None  # no job has marked one yet
    write_best(folder, 2, "pass_at_k", 1.0)
    base = "smollm2-135m-instruct"
    assert find(tmp_path, "agent-j1@best") == FrozenRef(
        "agent-j1", 2, base, folder / "checkpoints" / "0002"
    )
    assert find(tmp_path, f"{base}@best") is None  # a base model has no marked step


def test_unknown_names_steps_and_paths_are_none(tmp_path: Path) -> None:
    _model(tmp_path, "agent-j1", [1])
    _model(tmp_path, "local-j2", [1], base=str(tmp_path / "weights"))
    for requested in (
        "agent-j1@3",  # no such step
        "agent-j1@9",  # a folder without an adapter
        "ghost",
        "smollm2-135m-instruct@4",  # a base model has no step 4
        "../proj/models/agent-j1",
        "*",
        str(tmp_path / "elsewhere"),  # a path no model here was trained from
    ):
        assert find(tmp_path, requested) is None, requested
    # A base model recorded by the trainer itself may be a local folder.
    assert find(tmp_path, str(tmp_path / "weights")) is not None


def test_the_embedded_default_is_served_before_any_model_trained_from_it(tmp_path: Path) -> None:
    for name in ("smollm2-135m-instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"):
        assert find(tmp_path, name) == FrozenRef(name, 0, name, None)
