"""A torch backend's full fine-tunes (`TorchBackend.full`; the model: full_model.py):
registering one, its checkpoints and its gathered weights. On several ranks each piece
is a collective: rank 0 announces it and every rank runs it (rank_follower.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from artfleet.contracts.checkpoint_layout import is_full_checkpoint
from artfleet_trainer.backends.art_compat import art

from . import checkpoints, training
from .full_model import FullModel
from .model_state import portable

if TYPE_CHECKING:
    from .backend import TorchBackend, _ModelState

log = logging.getLogger(__name__)
MiB = 1024**2


class FullRuns:
    def __init__(self, backend: TorchBackend) -> None:
        self._backend = backend

    def register(
        self, model: art.TrainableModel, output_dir: Path, latest: Path, first_checkpoint: bool
    ) -> _ModelState:
        """Torch thread, rank 0: the model resumed from `latest` when that is its full
        checkpoint, else a copy of its base saved as step 0 (`first_checkpoint`)."""
        state = self.load(model, output_dir, latest if is_full_checkpoint(latest) else None)
        if state.step < 0 and first_checkpoint:  # step 0 on disk, as a LoRA's
            self.save(state, 0)
            self._backend._weights_changed(state, 0, None)
        return state

    def load(self, model: art.TrainableModel, output_dir: Path, resume: Path | None) -> _ModelState:
        """Torch thread (every rank): a full fine-tune's own copy of its base, or of the
        checkpoint `resume`, with its optimizer state."""
        backend = self._backend
        backend._announce("full_tenant", portable(model), output_dir, resume)
        loaded = backend._load_raw(model.base_model)
        full = FullModel(loaded, backend.ranks, resume)
        optimizer = training.make_optimizer(list(full.parameters()))
        if resume is not None:
            full.load_optimizer(optimizer, resume)
        step = int(resume.name) if resume is not None and backend.leads else -1
        log.info(
            "registered %s at step %d: a full fine-tune of %s (%.0f MiB of weights here)",
            model.name,
            step,
            model.base_model,
            full.param_bytes() / MiB,
        )
        return backend._attached(model, full, loaded.tokenizer, optimizer, output_dir, step)

    def follow(self, model: art.TrainableModel, output_dir: Path, resume: Path | None) -> None:
        """Torch thread of a follower rank: rank 0's new full fine-tune here too."""
        self._backend._states[model.name] = self.load(model, output_dir, resume)

    def save(self, state: _ModelState, step: int) -> Path:
        """Torch thread, rank 0: checkpoint `step`, written by every rank (its shard of
        the optimizer state; rank 0 the gathered model folder), renamed into place."""
        return checkpoints.save_staged(
            state.output_dir, step, lambda staging: self.save_into(state, staging)
        )

    def save_into(self, state: _ModelState, staging: Path) -> None:
        """Torch thread (every rank): the checkpoint into the staging folder `staging`."""
        self._backend._announce("save_full", state.model.name, staging)
        full = state.peft_model
        assert isinstance(full, FullModel)
        full.save(staging, state.optimizer)

    def weights(self, name: str) -> dict[str, torch.Tensor]:
        """Torch thread: the full fine-tune `name`'s weights on the CPU, gathered to rank 0
        from every rank's shards ({} on the others)."""
        self._backend._announce("full_weights", name)
        full = self._backend.state_named(name).peft_model
        if not isinstance(full, FullModel):
            raise ValueError(f"model {name!r} is a LoRA tenant, not a full fine-tune")
        return full.full_state()
