"""The trainer's start: alone, torchrun for this node's ranks, rank 0's service or a
follower (artfleet_trainer/launch.py), and the settings that describe the group."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from artfleet_trainer import launch
from artfleet_trainer.settings import TrainerSettings


def _settings(**values: object) -> TrainerSettings:
    return TrainerSettings(api_token="t" * 24, **values)  # type: ignore[arg-type]


def test_one_rank_is_the_service_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(launch.UNDER_TORCHRUN, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert launch.role(_settings()) == "service"


def test_several_ranks_start_torchrun_with_this_nodes_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(launch.UNDER_TORCHRUN, raising=False)
    settings = _settings(
        train_world=16,
        train_nodes=2,
        train_node_rank=1,
        train_master_addr="trainer-0.trainer-ranks",
        train_master_port=29511,
        train_max_restarts=2,
    )
    assert launch.role(settings) == "launch"
    argv = launch.torchrun_args(settings)
    assert argv[-2:] == ["-m", "artfleet_trainer"]
    for flag in (
        "--nnodes=2",
        "--nproc-per-node=8",
        "--node-rank=1",
        "--master-addr=trainer-0.trainer-ranks",
        "--master-port=29511",
        "--max-restarts=2",
    ):
        assert flag in argv


def test_under_torchrun_rank_0_serves_and_the_others_follow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(launch.UNDER_TORCHRUN, "run-1")
    settings = _settings(train_world=2)
    monkeypatch.setenv("RANK", "0")
    assert launch.role(settings) == "service"
    monkeypatch.setenv("RANK", "1")
    assert launch.role(settings) == "follower"


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"train_world": 3, "train_nodes": 2}, "multiple of train_nodes"),
        ({"train_world": 2, "train_nodes": 2, "train_node_rank": 2}, "below train_nodes"),
        ({"train_world": 2, "inference_engine": "torch"}, "ARTFLEET_INFERENCE_ENGINE=vllm"),
        ({"train_world": 0}, "greater than or equal to 1"),
    ],
)
def test_a_group_that_cannot_run_is_refused_at_start(values: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        _settings(**values)
