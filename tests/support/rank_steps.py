"""The same model work alone or on the ranks torchrun started (tests/integration/trainer/
test_ranks.py, bench/dist_step_bench.py): a GRPO step on the learning guard's frozen
batch, an SFT batch and a Tinker-compatible forward_backward + optim_step, each on its own
tenant; rank 0 writes each one's figures and updated adapter under `out`.

    python tests/support/rank_steps.py OUT                      # one process
    python -m torch.distributed.run --nproc-per-node 2 tests/support/rank_steps.py OUT
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from learning_guard import frozen_groups

from artfleet.contracts.base_models import DEFAULT_MODEL_NAME
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import TorchBackend
from artfleet_trainer.torch_backend.datum_training import LOSSES, Datum
from artfleet_trainer.torch_backend.rank_follower import NoServing, follow
from artfleet_trainer.torch_backend.ranks import RankGroup
from artfleet_trainer.torch_backend.training_clients import AdamParams

# Rows of about one trajectory each, 3 to an optimizer step: 2 ranks run 2 and 1(+1 of
# weight 0) of each step's rows, so the split and the padding are both exercised.
TRAIN_ARGS = {"packed_sequence_length": 96, "grad_accumulation_sequences": 3}


def _model(name: str, seed: int) -> art.TrainableModel:
    peft_args = art.dev.PeftArgs(r=8, lora_alpha=16, random_state=seed)
    return art.TrainableModel(
        name=name,
        project="ranks",
        base_model=DEFAULT_MODEL_NAME,
        _internal_config=art.dev.InternalModelConfig(peft_args=peft_args),
    )


def _adapter(backend: TorchBackend, model: art.Model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in backend.peft_model_of(model).adapter_state().items()}


async def grpo(backend: TorchBackend) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    model = _model("grpo", 11)
    await backend.register(model)
    started = time.monotonic()
    result = await backend.train(model, frozen_groups(), learning_rate=1e-3, **TRAIN_ARGS)
    seconds = time.monotonic() - started
    figures = {k: result.metrics[k] for k in ("loss", "grad_norm", "probs_corr")}
    return {**figures, "seconds": seconds}, _adapter(backend, model)


async def sft(backend: TorchBackend) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    model = _model("sft", 12)
    await backend.register(model)
    trajectories = [t for g in frozen_groups() for t in g.trajectories]
    batches = [
        m async for m in backend.train_sft(model, trajectories, learning_rate=1e-3, batch_size=5)
    ]
    figures = {"loss": batches[0]["loss/train"], "grad_norm": batches[0]["loss/grad_norm"]}
    figures["mean_loss"] = await backend.sft_loss(model, trajectories)
    return figures, _adapter(backend, model)


async def tinker(backend: TorchBackend) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    clients = backend.training_clients
    await clients.create("tinker", DEFAULT_MODEL_NAME, 8, 13)
    # 6 datums of 450 tokens: two packed rows (4 + 2 datums), one a rank
    datums = [
        Datum(list(range(10 + i, 460 + i)), list(range(11 + i, 461 + i)), {}) for i in range(6)
    ]
    outputs = await clients.forward_backward("tinker", datums, LOSSES["cross_entropy"], {})
    metrics = await clients.optim_step("tinker", AdamParams(learning_rate=1e-3))
    figures = {"loss": outputs.loss_sum, "grad_norm": metrics["grad_norm:mean"]}
    figures["logprob_0_0"] = outputs.logprobs[0][0]
    model: art.Model = art.TrainableModel(
        name="tinker", project="tinker", base_model=DEFAULT_MODEL_NAME
    )
    return figures, _adapter(backend, model)


async def lead(backend: TorchBackend, out: Path) -> None:
    figures: dict[str, Any] = {}
    for name, work in (("grpo", grpo), ("sft", sft), ("tinker", tinker)):
        figures[name], adapter = await work(backend)
        torch.save(adapter, out / f"{name}.pt")
    (out / "figures.json").write_text(json.dumps(figures, indent=1))
    await backend.close()


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ranks = RankGroup.from_env(timeout_s=120)
    if ranks is not None:
        ranks.start("cpu")
    backend = TorchBackend(
        path=str(out / "art"), device="cpu", serving=NoServing(), ranks=ranks, dtype="fp32"
    )
    if ranks is None or ranks.leader:
        asyncio.run(lead(backend, out))
    else:
        torch.set_num_threads(ranks.cpu_threads())
        follow(backend, ranks)


if __name__ == "__main__":
    main()
