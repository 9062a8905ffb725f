"""Model references (`name`, `name@step`, `name@latest`, `name@best`) and what they resolve
to on disk: the one reading every server and the trainer's model commands use
(artfleet.contracts.checkpoint_layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from artfleet.contracts.checkpoint_layout import (
    BEST,
    BEST_FILE,
    LATEST,
    ModelRefError,
    checkpoint_steps,
    describe_missing,
    find_checkpoint,
    is_full_checkpoint,
    marked_best,
    parse_model_name,
    resolve_step,
    write_best,
)


def _model(art: Path, name: str, steps: list[int]) -> Path:
    folder = art / "proj" / "models" / name
    for step in steps:
        checkpoint = folder / "checkpoints" / f"{step:04d}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "adapter_config.json").write_text("{}")
    return folder


def test_references_parse_into_a_name_and_a_step_or_alias() -> None:
    assert parse_model_name("pol@3") == ("pol", 3)
    assert parse_model_name("pol") == ("pol", None)
    assert parse_model_name("pol@latest") == ("pol", LATEST)
    assert parse_model_name("pol@best") == ("pol", BEST)
    assert parse_model_name("a@b@12") == ("a@b", 12)
    assert parse_model_name("@3") == ("@3", None)  # no name: no model by that name either


@pytest.mark.parametrize("ref", ["pol@x", "pol@", "pol@Best", "pol@-1", "pol@1.5"])
def test_other_suffixes_are_refused_naming_the_forms(ref: str) -> None:
    with pytest.raises(ModelRefError, match="name@best"):
        parse_model_name(ref)


def test_best_resolves_to_the_marked_step_while_it_exists(tmp_path: Path) -> None:
    folder = _model(tmp_path, "pol", [0, 1, 2, 3])
    assert marked_best(folder) is None
    assert resolve_step(folder, BEST) is None  # nothing marked yet
    write_best(folder, 1, "pass_at_k", 0.75)
    assert marked_best(folder) == 1
    assert resolve_step(folder, BEST) == 1
    assert find_checkpoint(tmp_path, "pol", BEST) == (1, folder / "checkpoints" / "0001")
    assert sorted(p.name for p in folder.iterdir()) == [BEST_FILE, "checkpoints"]  # no staging left
    write_best(folder, 2, "pass_at_k", 0.8)  # a later eval ranks another step first
    assert resolve_step(folder, BEST) == 2
    write_best(folder, 9, "pass_at_k", 1.0)  # a mark whose checkpoint is gone names nothing
    assert resolve_step(folder, BEST) is None


def test_latest_plain_and_numbered_steps(tmp_path: Path) -> None:
    folder = _model(tmp_path, "pol", [0, 2])
    assert resolve_step(folder, None) == resolve_step(folder, LATEST) == 2
    assert resolve_step(folder, 0) == 0
    assert resolve_step(folder, 1) is None
    assert resolve_step(tmp_path / "proj" / "models" / "ghost", LATEST) is None


@pytest.mark.parametrize("content", ["", "{", '{"step": "2"}', '{"step": true}', "[2]"])
def test_an_unreadable_mark_marks_nothing(tmp_path: Path, content: str) -> None:
    folder = _model(tmp_path, "pol", [2])
    (folder / BEST_FILE).write_text(content)
    assert marked_best(folder) is None and resolve_step(folder, BEST) is None


def test_missing_checkpoints_are_described() -> None:
    assert describe_missing("pol", 7) == "model 'pol' has no checkpoint 7"
    assert describe_missing("pol", None) == "model 'pol' has no checkpoint"
    assert "keep_best_metric" in describe_missing("pol", BEST)


def test_a_full_fine_tunes_model_folder_is_a_step_and_half_written_folders_are_not(
    tmp_path: Path,
) -> None:
    folder = _model(tmp_path, "agent", [1])
    full = folder / "checkpoints" / "0002"
    full.mkdir()
    (full / "config.json").write_text("{}")
    (folder / "checkpoints" / "0003" / "optimizer").mkdir(parents=True)  # no config yet
    assert checkpoint_steps(folder) == [1, 2]
    assert is_full_checkpoint(full)
    assert not is_full_checkpoint(folder / "checkpoints" / "0001")
