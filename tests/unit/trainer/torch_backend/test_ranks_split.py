"""How a step's rows are dealt to ranks, and how their figures come back together
(torch_backend/ranks.py, training.StepStats.merged): pure logic, no process group."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import pytest
import torch

from artfleet.contracts.errors import Unavailable
from artfleet_trainer.torch_backend.backend import TorchBackend
from artfleet_trainer.torch_backend.ranks import RankGroup, Share, place_unsharded
from artfleet_trainer.torch_backend.training import StepStats
from artfleet_trainer.torch_backend.worker import TorchWorker


def _group(rank: int, world: int) -> RankGroup:
    return RankGroup(rank, world, local_rank=rank, local_world=world, timeout_s=60)


@pytest.mark.parametrize(("rows", "world"), [(1, 2), (3, 2), (4, 2), (5, 3), (7, 4), (2, 4)])
def test_every_row_runs_once_and_every_rank_runs_as_many(rows: int, world: int) -> None:
    shares = [_group(rank, world).share(rows) for rank in range(world)]
    counted = sorted(s.index for mine in shares for s in mine if s.counts)
    assert counted == list(range(rows))
    assert len({len(mine) for mine in shares}) == 1  # the same number of passes on each
    padding = [s for mine in shares for s in mine if not s.counts]
    assert len(padding) == world * len(shares[0]) - rows
    assert all(s.index == 0 for s in padding)  # a real row, run with weight 0


def test_a_rank_with_no_row_of_its_own_still_runs_one() -> None:
    assert _group(1, 2).share(1) == [Share(0, counts=False)]


def test_merged_stats_keep_every_rows_figures_and_one_step_norm() -> None:
    first = StepStats(losses=[1.0, 2.0], grad_norms=[0.5], masked_sequences=1)
    first.log_ratios.append(torch.zeros(2))
    second = StepStats(losses=[3.0], grad_norms=[0.5], masked_sequences=2)
    merged = StepStats.merged([first, second])
    assert merged.losses == [1.0, 2.0, 3.0]
    assert merged.grad_norms == [0.5]
    assert merged.masked_sequences == 3
    assert len(merged.log_ratios) == 1
    assert StepStats.merged([StepStats(), StepStats()]).masked_sequences is None


def test_outside_torchrun_there_is_no_group(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert RankGroup.from_env(60) is None
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert RankGroup.from_env(60) is None  # one rank: today's backend, no group
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    group = RankGroup.from_env(60)
    assert group is not None and (group.rank, group.world, group.leader) == (3, 4, False)
    assert group.device("cuda") == "cuda:1" and group.device("cpu") == "cpu"


@pytest.mark.parametrize(
    ("error", "broke"),
    [
        (RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer"), True),
        (RuntimeError("NCCL communicator was aborted on rank 1"), True),
        (torch.distributed.DistBackendError("timed out"), True),
        (RuntimeError("CUDA out of memory"), False),
        (ValueError("no trainable SFT trajectory"), False),
    ],
)
def test_only_a_failed_collective_reads_as_a_broken_group(
    error: Exception, broke: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    signals: list[int] = []
    monkeypatch.setattr("os.kill", lambda pid, sig: signals.append(sig))
    group = _group(0, 2)
    lost = group.lost(error)
    assert (lost is not None) == broke and group.broken == broke
    if broke:
        assert isinstance(lost, Unavailable) and "retry later" in str(lost)
        assert signals == [signal.SIGTERM]  # rank 0 stops itself; its exit fails
        group.lost(error)
        assert signals == [signal.SIGTERM]  # once


async def test_the_torch_thread_hands_the_caller_the_translated_error() -> None:
    group = _group(0, 2)
    group.broken = True  # already stopping: no signal
    worker = TorchWorker(1, group.lost)

    def collective() -> None:
        raise RuntimeError("Connection closed by peer [127.0.0.1]:1234")

    def plain() -> None:
        raise ValueError("bad datum")

    try:
        with pytest.raises(Unavailable, match="ranks lost one"):
            await worker.run(collective)
        with pytest.raises(ValueError, match="bad datum"):
            await worker.run(plain)
    finally:
        worker.shutdown()


def test_what_fsdp_leaves_whole_is_placed_on_the_ranks_device() -> None:
    """A LoRA base's whole output head and a buffer outside FSDP's units follow the units
    to the rank's device (the base is read into host memory on CUDA ranks); "meta"
    stands in for a GPU here."""
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(3, 2))
    module[1].weight = module[0].weight  # tied, as a head to its embeddings
    module[0].weight.requires_grad_(False)
    module.register_buffer("inv_freq", torch.ones(4))
    place_unsharded(module, torch.device("meta"))
    assert {t.device.type for t in [*module.parameters(), *module.buffers()]} == {"meta"}
    assert module[1].weight is module[0].weight  # still tied
    assert isinstance(module[0].weight, torch.nn.Parameter)
    assert not module[0].weight.requires_grad and module[0].bias.requires_grad


def test_cuda_ranks_read_a_base_into_host_memory_and_one_process_onto_its_device() -> None:
    ranks, alone = SimpleNamespace(ranks=object(), device="cuda:3"), SimpleNamespace(ranks=None)
    assert TorchBackend.load_device.fget(ranks) == "cpu"  # type: ignore[attr-defined]
    alone.device = "cuda:0"
    assert TorchBackend.load_device.fget(alone) == "cuda:0"  # type: ignore[attr-defined]
