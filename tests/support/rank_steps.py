"""The same model work alone or on the ranks torchrun started (tests/integration/trainer/
test_ranks.py, bench/dist_step_bench.py): a GRPO step on the learning guard's frozen
batch, an SFT batch and a Tinker-compatible forward_backward + optim_step, each on its own
tenant, and a full fine-tune's GRPO step (`full`); rank 0 writes each one's figures and
updated adapter (or weights) under `out`.

    python tests/support/rank_steps.py OUT                      # one process
    python -m torch.distributed.run --nproc-per-node 2 tests/support/rank_steps.py OUT
        [--works grpo,sft,tinker] [--steps N] [--tinker-datums N --tinker-tokens T]
        [--threads T] [--resume-full OTHER_OUT] [--base FOLDER]

`--base`: the base model every tenant shares (default: the embedded SmolLM2); the test
passes a tiny random model's folder, the bench leaves the real one.

Each rank also writes the bytes of the base's parameters it holds (its FSDP shards plus
what stays whole: the output head) to `OUT/param_bytes.<rank>`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from learning_guard import frozen_groups

from artfleet.contracts.base_models import DEFAULT_MODEL_NAME
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.torch_backend import TorchBackend, checkpoints
from artfleet_trainer.torch_backend.datum_training import LOSSES, Datum
from artfleet_trainer.torch_backend.full_model import FullModel
from artfleet_trainer.torch_backend.rank_follower import NoServing, follow
from artfleet_trainer.torch_backend.ranks import RankGroup
from artfleet_trainer.torch_backend.training_clients import AdamParams

# Rows of about one trajectory each, 3 to an optimizer step: 2 ranks run 2 and 1(+1 of
# weight 0) of each step's rows, so the split and the padding are both exercised.
TRAIN_ARGS = {"packed_sequence_length": 96, "grad_accumulation_sequences": 3}
BASE = DEFAULT_MODEL_NAME  # --base sets it, once, before any work


def _model(name: str, seed: int) -> art.TrainableModel:
    peft_args = art.dev.PeftArgs(r=8, lora_alpha=16, random_state=seed)
    config = art.dev.InternalModelConfig(peft_args=peft_args)
    if name.startswith("full"):  # finetune: full, as the job runner says it
        config["init_args"] = art.dev.InitArgs(full_finetuning=True)
    return art.TrainableModel(name=name, project="ranks", base_model=BASE, _internal_config=config)


def _adapter(backend: TorchBackend, model: art.Model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in backend.peft_model_of(model).adapter_state().items()}


async def _weights(backend: TorchBackend, model: art.Model) -> dict[str, torch.Tensor]:
    """The model's trained weights on the CPU (a full fine-tune's gathered to rank 0)."""
    if isinstance(backend.peft_model_of(model), FullModel):
        return await backend.run_on_torch_thread(backend.full.weights, model.name)
    return _adapter(backend, model)


async def grpo(
    backend: TorchBackend, steps: int = 1, name: str = "grpo"
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """`steps` GRPO steps on the frozen batch; the figures are the first step's, the
    seconds those of each step after the first (the first also warms the allocator).
    `name` "full": a full fine-tune's (every weight trains)."""
    model = _model(name, 11)
    await backend.register_model(model)  # as the job runner does (ART's model.register)
    figures: dict[str, float] = {}
    for step in range(steps):
        started = time.monotonic()
        result = await backend.train(model, frozen_groups(), learning_rate=1e-3, **TRAIN_ARGS)
        seconds = time.monotonic() - started
        if step == 0:
            figures = {k: result.metrics[k] for k in ("loss", "grad_norm", "probs_corr")}
            figures["seconds"] = seconds
        else:
            figures[f"seconds_{step}"] = seconds
    trained = await _weights(backend, model)
    # Released, then registered again: it resumes its checkpoint (rank 0 reads it, the
    # other ranks receive it; a full fine-tune's every rank reads), as a restarted
    # trainer does.
    await backend.unregister(model.name)
    figures.update(await resume(backend, name, trained))
    return figures, await _weights(backend, _model(name, 11))


async def resume(
    backend: TorchBackend, name: str, trained: dict[str, torch.Tensor]
) -> dict[str, float]:
    """The model `name` registered from its latest checkpoint: how far its weights are
    from `trained`, and one more GRPO step's figures (they depend on the resumed optimizer
    state too)."""
    await backend.register_model(_model(name, 11))
    resumed = await _weights(backend, _model(name, 11))
    figures = {
        "resumed_max_diff": max(float((trained[k] - resumed[k]).abs().max()) for k in trained)
    }
    # and trains on, every rank's rows counted (a follower's resumed copy trains too)
    result = await backend.train(
        _model(name, 11), frozen_groups(), learning_rate=1e-3, **TRAIN_ARGS
    )
    figures["resumed_step_loss"] = result.metrics["loss"]
    figures["resumed_step_grad_norm"] = result.metrics["grad_norm"]
    return figures


async def sft(backend: TorchBackend) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    model = _model("sft", 12)
    await backend.register_model(model)  # as the job runner does (ART's model.register)
    trajectories = [t for g in frozen_groups() for t in g.trajectories]
    batches = [
        m async for m in backend.train_sft(model, trajectories, learning_rate=1e-3, batch_size=5)
    ]
    figures = {"loss": batches[0]["loss/train"], "grad_norm": batches[0]["loss/grad_norm"]}
    figures["mean_loss"] = await backend.sft_loss(model, trajectories)
    return figures, _adapter(backend, model)


async def tinker(
    backend: TorchBackend, steps: int = 1, count: int = 4, tokens: int = 520
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """`steps` forward_backward + optim_step calls on `count` datums of `tokens` (the
    default: two packed rows of at most 2,048 tokens, 3 + 1 datums, one a rank); figures
    and seconds as grpo's."""
    clients = backend.training_clients
    await clients.create("tinker", BASE, 8, 13)
    datums = [
        Datum(list(range(10 + i, 10 + tokens + i)), list(range(11 + i, 11 + tokens + i)), {})
        for i in range(count)
    ]
    figures: dict[str, float] = {}
    for step in range(steps):
        started = time.monotonic()
        outputs = await clients.forward_backward("tinker", datums, LOSSES["cross_entropy"], {})
        metrics = await clients.optim_step("tinker", AdamParams(learning_rate=1e-3))
        seconds = time.monotonic() - started
        if step == 0:
            figures = {"loss": outputs.loss_sum, "grad_norm": metrics["grad_norm:mean"]}
            figures["logprob_0_0"] = outputs.logprobs[0][0]
        figures["seconds" if step == 0 else f"seconds_{step}"] = seconds
    # Saved, moved on, then the save loaded back (weights and optimizer state; on ranks,
    # sent from rank 0): the client is the saved one again.
    saved_step = await clients.save("tinker")
    saved = _adapter(backend, _tinker_model())
    short = [Datum(list(range(10, 30)), list(range(11, 31)), {})]  # moves it, cheaply
    await clients.forward_backward("tinker", short, LOSSES["cross_entropy"], {})
    await clients.optim_step("tinker", AdamParams(learning_rate=1e-3))
    checkpoint = checkpoints.checkpoint_dir(clients.model_dir("tinker"), saved_step)
    await clients.load("tinker", checkpoint, optimizer=True)
    loaded = _adapter(backend, _tinker_model())
    figures["loaded_max_diff"] = max(float((saved[k] - loaded[k]).abs().max()) for k in saved)
    return figures, _adapter(backend, _tinker_model())


def _tinker_model() -> art.Model:
    return art.TrainableModel(name="tinker", project="tinker", base_model=BASE)


def param_bytes(backend: TorchBackend) -> int:
    """Bytes of the base's parameters this rank holds (a DTensor's local shard)."""
    total = 0
    for param in backend.bases.models()[0].parameters():
        local = param.to_local() if hasattr(param, "to_local") else param
        total += local.numel() * local.element_size()
    return total


def write_param_bytes(backend: TorchBackend, out: Path, rank: int) -> None:
    """`param_bytes.<rank>`: the shared base's bytes here; `full_param_bytes.<rank>`: the
    full fine-tune's (its shards), when one ran."""
    if len(backend.bases):
        (out / f"param_bytes.{rank}").write_text(str(param_bytes(backend)))
    try:
        full = backend.state_named("full").peft_model
    except KeyError:
        return
    assert isinstance(full, FullModel)
    (out / f"full_param_bytes.{rank}").write_text(str(full.param_bytes()))


async def resume_elsewhere(backend: TorchBackend, run: Path) -> dict[str, float]:
    """The full fine-tune's step 1 of another run (another number of ranks: DCP reshards
    its optimizer state) resumed here as `full-elsewhere`, and trained on."""
    from safetensors.torch import load_file

    here = checkpoints.model_dir(backend.path, _model("full-elsewhere", 11))
    source = checkpoints.checkpoint_dir(
        checkpoints.model_dir(str(run / "art"), _model("full", 11)), 1
    )
    shutil.copytree(source, checkpoints.checkpoint_dir(here, 1))
    saved = {k: v for f in sorted(source.glob("*.safetensors")) for k, v in load_file(f).items()}
    return await resume(backend, "full-elsewhere", saved)


async def lead(backend: TorchBackend, out: Path, args: argparse.Namespace) -> None:
    figures: dict[str, Any] = {}
    if args.resume_full is not None:
        figures["full_elsewhere"] = await resume_elsewhere(backend, args.resume_full)
    for name in filter(None, args.works.split(",")):
        if name in ("grpo", "full"):
            figures[name], adapter = await grpo(backend, args.steps, name)
        elif name == "tinker":
            figures[name], adapter = await tinker(
                backend, args.steps, args.tinker_datums, args.tinker_tokens
            )
        else:
            figures[name], adapter = await sft(backend)
        torch.save(adapter, out / f"{name}.pt")
    (out / "figures.json").write_text(json.dumps(figures, indent=1))
    await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--works", default="grpo,sft,tinker")
    parser.add_argument("--steps", type=int, default=1, help="of grpo and tinker")
    parser.add_argument("--tinker-datums", type=int, default=4)
    parser.add_argument("--tinker-tokens", type=int, default=520)
    parser.add_argument(
        "--resume-full", type=Path, help="another run's OUT: resume its full fine-tune's step 1"
    )
    parser.add_argument("--threads", type=int, default=0, help="per rank (0: its share)")
    parser.add_argument("--base", default=DEFAULT_MODEL_NAME, help="a model's name or folder")
    args = parser.parse_args()
    global BASE
    BASE = args.base
    args.out.mkdir(parents=True, exist_ok=True)
    ranks = RankGroup.from_env(timeout_s=120)
    if ranks is not None:
        ranks.start("cpu")
    threads = args.threads or None
    backend = TorchBackend(
        path=str(args.out / "art"),
        device="cpu",
        serving=NoServing(),
        ranks=ranks,
        dtype="fp32",
        num_threads=threads,
        train_num_threads=threads,
    )
    if ranks is None or ranks.leader:
        asyncio.run(lead(backend, args.out, args))
    else:
        torch.set_num_threads(threads or ranks.cpu_threads())
        follow(backend, ranks)
    rank = 0 if ranks is None else ranks.rank  # the bases stay loaded after the group ends
    write_param_bytes(backend, args.out, rank)


if __name__ == "__main__":
    main()
