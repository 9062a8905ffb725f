"""The checkpoint a job's `keep_best_metric` ranks first is marked on disk after each step
(artfleet_trainer.jobs.retention), so `name@best` resolves the same on every server."""

from __future__ import annotations

from pathlib import Path

from artfleet.contracts.checkpoint_layout import BEST, marked_best, resolve_step
from artfleet.specs.job import JobSpecModel
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer.jobs import retention


def _checkpoints(art: Path, name: str, steps: list[int]) -> Path:
    folder = art / "artfleet" / "models" / name
    for step in steps:
        checkpoint = folder / "checkpoints" / f"{step:04d}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "adapter_config.json").write_text("{}")
    return folder


def _job(pass_at_k: dict[int, float], sft_checkpoint: int = 0) -> pb.Job:
    job = pb.Job(id="j1")
    for step, value in pass_at_k.items():
        job.evals.append(pb.EvalSummary(step=step, pass_at_k=value))
    if sft_checkpoint:
        job.sft.done, job.sft.checkpoint_step = True, sft_checkpoint
    return job


def test_best_is_marked_without_retention_and_follows_new_evals(tmp_path: Path) -> None:
    folder = _checkpoints(tmp_path, "agent-j1", [0, 1, 2])
    spec = JobSpecModel.model_validate({"keep_best_metric": "pass_at_k"})  # keep_last: all
    assert retention.apply(str(tmp_path), "agent-j1", _job({0: 0.2, 1: 0.9, 2: 0.5}), spec) == []
    assert marked_best(folder) == resolve_step(folder, BEST) == 1
    _checkpoints(tmp_path, "agent-j1", [3])
    retention.apply(str(tmp_path), "agent-j1", _job({0: 0.2, 1: 0.9, 2: 0.5, 3: 1.0}), spec)
    assert marked_best(folder) == 3


def test_sft_offset_and_no_metric(tmp_path: Path) -> None:
    folder = _checkpoints(tmp_path, "agent-j1", [0, 1, 2])
    spec = JobSpecModel.model_validate({"keep_best_metric": "pass_at_k"})
    # After an SFT phase (checkpoint 1), GRPO step s is checkpoint s + 1.
    retention.apply(str(tmp_path), "agent-j1", _job({0: 0.9, 1: 0.1}, sft_checkpoint=1), spec)
    assert marked_best(folder) == 1
    other = _checkpoints(tmp_path, "agent-j2", [0, 1])
    retention.apply(str(tmp_path), "agent-j2", _job({0: 0.9}), JobSpecModel.model_validate({}))
    assert marked_best(other) is None  # no keep_best_metric: nothing is ranked


def test_prune_keeps_the_newest_the_best_and_what_a_running_job_uses() -> None:
    steps = [0, 1, 2, 3, 4, 5]
    assert retention.keep_reasons(steps, 2, best=1) == {1: "best", 4: "newest 2", 5: "newest 2"}
    # keep 0: only the best, and a running job's latest and served checkpoints.
    assert retention.keep_reasons(steps, 0, best=None) == {}
    running = retention.keep_reasons(steps, 1, best=9, in_use={5: "latest", 3: "served", 7: "x"})
    assert running == {5: "newest 1", 3: "served"}
    # Retention during a run: keep_last 0 = all; the latest always.
    assert retention.steps_to_keep(steps, 1, best=2) == {2, 5}
    assert retention.steps_to_keep(steps, 0, best=None) == set(steps)
