"""SFT on the torch backend's tenants (`TorchBackend.sft`): ART's SFT protocol, batch by
batch on the backend's torch thread, and the mean loss of trajectories. Each batch's model
work runs on every rank of a backend on several (ranks.py)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from typing import TYPE_CHECKING, Any

from artfleet_trainer.backends.art_compat import art

from . import checkpoints, precision, sft
from .worker import training_thread_scope

if TYPE_CHECKING:
    from .backend import TorchBackend, _ModelState

log = logging.getLogger(__name__)


class SftRuns:
    def __init__(self, backend: TorchBackend) -> None:
        self._backend = backend

    async def train(
        self,
        model: art.TrainableModel,
        trajectories: Iterable[art.Trajectory],
        config: art.types.TrainSFTConfig,
        verbose: bool = False,
        *,
        max_length: int = 0,
    ) -> AsyncIterator[dict[str, float]]:
        """ART's SFT protocol (what `model.train_sft` drives): masked cross-entropy on the
        assistant tokens, `config.batch_size` trajectories per optimizer step at
        `config.learning_rate` (one rate, or one per batch as ART takes it), yielding each
        batch's metrics; then saves checkpoint step+1 and serves it, as `train` does.
        Trajectories longer than `max_length` (0 = the context) or without a trainable
        token are dropped and counted (`data/step_num_dropped_trajectories`)."""
        backend = self._backend
        state = backend._state_of(model)
        limit = min(max_length or state.max_context, state.max_context)
        rows, dropped = await backend._worker.run(
            tokenize_all, state.tokenizer, trajectories, limit
        )
        if not rows:
            raise ValueError(f"no trainable SFT trajectory ({dropped} dropped)")
        size = config.batch_size if isinstance(config.batch_size, int) else 2
        batches = [rows[i : i + size] for i in range(0, len(rows), size)]
        rates = config.learning_rate
        if isinstance(rates, list) and len(rates) < len(batches):
            raise ValueError(f"{len(rates)} learning rates for {len(batches)} batches")
        async with backend._gate:
            old = await backend._worker.run(backend._weights_changing, state)
            for i, batch in enumerate(batches):
                rate = rates[i] if isinstance(rates, list) else rates
                metrics = await backend._worker.run(self.batch, state, batch, float(rate))
                yield {**metrics, "data/step_num_dropped_trajectories": float(dropped)}
            step = await backend._worker.run(self._save, state, old)
            await backend._publish(state, step)
        if verbose:
            log.info("SFT on %s: %d batches, checkpoint %d", model.name, len(batches), step)

    def batch(self, state: _ModelState, batch: list[sft.SftRow], rate: float) -> dict[str, float]:
        """Torch thread: one SFT batch's optimizer step (on every rank)."""
        backend = self._backend
        backend._announce("sft", state.model.name, batch, rate)
        state.peft_model.activate()
        with training_thread_scope(backend.device, backend.train_num_threads):
            return sft.train_batch(
                state.peft_model,
                state.optimizer,
                batch,
                rate,
                activation_budget_bytes=backend.activation_budget_bytes,
                memory_fraction=backend.memory_fraction,
                ranks=backend.ranks,
            )

    def mean_loss(self, state: _ModelState, rows: list[sft.SftRow]) -> float:
        """Torch thread: the mean SFT loss of `rows`, no update (on every rank)."""
        backend = self._backend
        backend._announce("sft_loss", state.model.name, rows)
        state.peft_model.activate()
        return sft.mean_loss(state.peft_model, rows, backend.ranks)

    def _save(self, state: _ModelState, old: object | None) -> int:
        backend = self._backend
        new_step = max(state.step, checkpoints.latest_step(state.output_dir)) + 1
        backend.save_checkpoint(state, new_step)
        precision.release_cached_memory(backend.device)
        backend._weights_changed(state, new_step, old)
        return new_step

    async def loss(self, model: art.TrainableModel, trajectories: list[art.Trajectory]) -> float:
        """Mean cross-entropy per assistant token of `trajectories` under the current
        weights (no update; tests and reports)."""
        backend = self._backend
        state = backend._state_of(model)
        rows, _ = await backend._worker.run(
            tokenize_all, state.tokenizer, trajectories, state.max_context
        )
        async with backend._gate:
            return await backend._worker.run(self.mean_loss, state, rows)


def tokenize_all(
    tokenizer: Any, trajectories: Iterable[art.Trajectory], max_length: int
) -> tuple[list[sft.SftRow], int]:
    rows, dropped = [], 0
    for trajectory in trajectories:
        try:
            rows.append(sft.tokenize_sft(tokenizer, trajectory, max_length))
        except sft.NotTrainable as exc:
            log.debug("SFT trajectory dropped: %s", exc)
            dropped += 1
    return rows, dropped
