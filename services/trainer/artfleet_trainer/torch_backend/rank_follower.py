"""A follower rank (every rank but 0): the same tenants and the same model work as rank 0,
nothing else.

Rank 0 is the trainer service; before each piece of model work its backend announces it
(`TorchBackend._announce`: an op name and picklable arguments, model names for live
objects) and the follower runs the very method rank 0 runs next, on its own backend, so
the collectives inside (FSDP's gathers, the summed gradients, the gathered figures) meet.
A follower serves nothing and publishes nothing: rank 0 saves the (replicated) adapters and
publishes them; of a full fine-tune's checkpoint, each rank writes its optimizer state's
shard (full_model.py). An op that fails here ends the process: torchrun then ends and restarts
the whole group, and rank 0's jobs resume from their last checkpoints.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .backend import TorchBackend
from .ranks import STOP, RankGroup, RankOp

log = logging.getLogger(__name__)


class NoServing:
    """A `PolicyServing` that serves no policy: a follower rank's (rank 0 publishes), or a
    backend driven directly (the ranks' tests and benchmark)."""

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def endpoint(self) -> tuple[str, str]:
        return "", ""  # no URL: ART's `model.register` asks, nothing calls it here

    async def sampling_endpoint(self) -> tuple[str, str]:
        return await self.endpoint()

    def public_url(self) -> str | None:
        return None

    async def healthy(self) -> bool:
        return True

    def attach(self, name: str, peft_model: Any, tokenizer: Any, step: int) -> None:
        return None

    async def detach(self, name: str) -> None:
        return None

    def weights_changing(self, name: str) -> object | None:
        return None

    def weights_changed(self, name: str, step: int, before: object | None) -> None:
        return None

    async def publish(self, name: str, step: int, checkpoint: Path, base_model: str) -> None:
        return None

    async def retire(self, name: str, steps: list[int]) -> None:
        return None


def _tenant(backend: TorchBackend, model: Any, output_dir: Path, first: bool, lora: Any) -> None:
    backend.follow_tenant(model, output_dir, first, lora)


def _on_state(method: Callable[..., Any]) -> Callable[..., None]:
    """An op whose first argument names the model: the method gets this rank's state."""

    def run(backend: TorchBackend, name: str, *args: Any) -> None:
        method(backend, backend.state_named(name), *args)

    return run


# One entry per op rank 0 announces (grep `_announce(` in torch_backend).
OPS: dict[str, Callable[..., None]] = {
    "tenant": _tenant,
    "full_tenant": lambda backend, *args: backend.full.follow(*args),
    "save_full": _on_state(lambda b, state, staging: b.full.save_into(state, staging)),
    "full_weights": lambda backend, name: backend.full.weights(name),
    "release": lambda backend, name, base: backend.release_tenant(name, base),
    "train": _on_state(lambda b, state, *a: b.train_packed(state, *a)),
    "sft": _on_state(lambda b, state, *a: b.sft.batch(state, *a)),
    "sft_loss": _on_state(lambda b, state, *a: b.sft.mean_loss(state, *a)),
    "datums": _on_state(lambda b, state, *a: b.training_clients.forward_backward_sync(state, *a)),
    "adam": _on_state(lambda b, state, *a: b.training_clients.optim_step_sync(state, *a)),
    "sync": _on_state(lambda b, state, *a: b.training_clients.sync_ranks(state, *a)),
}


def follow(backend: TorchBackend, ranks: RankGroup) -> None:
    """Run rank 0's ops until it says stop (then leave the group)."""
    while True:
        op: RankOp = ranks.receive()
        if op == STOP:
            break
        run = OPS.get(op.name)
        if run is None:
            raise RuntimeError(f"rank 0 announced an op this rank does not know: {op.name!r}")
        log.info("rank %d runs %s", ranks.rank, op.name)
        run(backend, *op.args)
    log.info("rank %d: rank 0 stopped the group", ranks.rank)
    ranks.stop()
