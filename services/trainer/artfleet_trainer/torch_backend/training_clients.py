"""Training clients of the Tinker-compatible API on the torch backend.

Each client is a registered model of the backend (a LoRA on its base model, its own
optimizer, its checkpoints in the fleet's layout under the project `tinker`), driven by
the primitives instead of a job: `forward_backward` adds gradients, `optim_step` applies
them with the caller's Adam parameters, `save` writes the weights as the next checkpoint
and serves them as `name@step`. All of it runs on the backend's torch thread and takes
the same gate as a job's step, so clients and jobs take turns, first come first served.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors.torch import load_file

from artfleet.contracts.checkpoint_layout import ADAPTER_CONFIG
from artfleet.contracts.errors import FailedPrecondition, InvalidArgument, NotFound
from artfleet_trainer.backends.art_compat import art

from . import checkpoints, datum_training, precision
from .training import StepMemory, StepStats, optim_step
from .worker import training_thread_scope

if TYPE_CHECKING:
    from .backend import TorchBackend, _ModelState

log = logging.getLogger(__name__)

PROJECT = "tinker"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass(frozen=True)
class AdamParams:
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0  # 0: no clipping


@dataclass(frozen=True)
class ClientInfo:
    name: str
    base_model: str
    max_context: int
    arch: str
    output_dir: Path


class TrainingClients:
    """The backend's side of the Tinker-compatible API: clients by name."""

    def __init__(self, backend: TorchBackend) -> None:
        self._backend = backend
        self._dirty: set[str] = set()  # trained since their last save
        self._contexts: dict[str, int] = {}  # what the engine that samples them takes

    def model_dir(self, name: str) -> Path:
        return Path(self._backend.path) / PROJECT / "models" / name

    async def create(
        self, name: str, base_model: str, rank: int, seed: int | None, max_context: int = 0
    ) -> ClientInfo:
        """Load `base_model` with a fresh LoRA of `rank` (its init drawn from `seed`), or
        the client's latest checkpoint when one is on disk (a trainer restart). Nothing is
        written before the client's first save. `max_context` (0: the model's): the
        longest datum, as long as the engine that samples the client takes."""
        peft_args = art.dev.PeftArgs(r=rank, lora_alpha=2 * rank)
        if seed is not None:  # drawn on the torch thread, around the adapter's creation
            peft_args["random_state"] = seed
        model: art.TrainableModel = art.TrainableModel(
            name=name,
            project=PROJECT,
            base_model=base_model,
            _internal_config=art.dev.InternalModelConfig(peft_args=peft_args),
        )
        await self._backend.register(model, first_checkpoint=False)
        if max_context > 0:
            self._contexts[name] = max_context
        return self.info(name)

    def info(self, name: str) -> ClientInfo:
        state = self._state(name)
        config = state.peft_model.get_base_model().config
        return ClientInfo(
            name,
            state.model.base_model,
            min(state.max_context, self._contexts.get(name, state.max_context)),
            str(getattr(config, "model_type", "") or ""),
            state.output_dir,
        )

    def room(self, rank: int) -> tuple[int, str]:
        """How many more rank-`rank` clients the device's free memory holds, and why."""
        return self._backend.tenant_room(rank)

    def loaded(self, name: str) -> bool:
        return name in self._backend._states

    def served_step(self, name: str) -> int:
        """The saved step the client's live weights are (-1: trained since its last save)."""
        return self._state(name).step

    async def retire(self, name: str, step: int) -> None:
        """A deleted checkpoint: the inference service stops serving it."""
        await self._backend.retire_steps(name, [step])

    def _state(self, name: str) -> _ModelState:
        state = self._backend._states.get(name)
        if state is None:
            raise NotFound(f"training client {name!r} is not loaded")
        return state

    def check(
        self,
        name: str,
        datums: Sequence[datum_training.Datum],
        loss_fn: str,
        config: Mapping[str, float],
    ) -> datum_training.LossSpec:
        """The loss named, once `datums` and `config` fit it and the client's context
        (InvalidArgument naming what does not)."""
        state = self._state(name)
        vocab = int(state.peft_model.get_input_embeddings().num_embeddings)
        context = self.info(name).max_context
        return datum_training.check(datums, loss_fn, config, context, vocab)

    async def forward_backward(
        self,
        name: str,
        datums: Sequence[datum_training.Datum],
        spec: datum_training.LossSpec,
        config: Mapping[str, float],
        *,
        forward_only: bool = False,
    ) -> datum_training.DatumOutputs:
        """`datums` as `check` passed them, with the loss it returned."""
        state = self._state(name)
        backend = self._backend
        async with backend._gate:
            outputs = await backend._worker.run(
                self.forward_backward_sync, state, datums, spec, config, forward_only
            )
        if not forward_only:
            self._dirty.add(name)
        return outputs

    def forward_backward_sync(
        self,
        state: _ModelState,
        datums: Sequence[datum_training.Datum],
        spec: datum_training.LossSpec,
        config: Mapping[str, float],
        forward_only: bool,
    ) -> datum_training.DatumOutputs:
        """Torch thread: the call's model work (on every rank)."""
        backend = self._backend
        backend._announce("datums", state.model.name, datums, spec, config, forward_only)
        state.peft_model.activate()
        memory = None
        if not forward_only:
            memory = StepMemory.measure(
                state.peft_model, {}, backend.activation_budget_bytes, backend.memory_fraction
            )
        with training_thread_scope(backend.device, backend.train_num_threads):
            outputs = datum_training.run(
                state.peft_model, datums, spec, config, memory, backend.ranks
            )
        return outputs

    async def optim_step(self, name: str, adam: AdamParams) -> dict[str, float]:
        state = self._state(name)
        for key in ("learning_rate", "beta1", "beta2", "eps", "weight_decay", "grad_clip_norm"):
            value = getattr(adam, key)
            if not (value >= 0 and value < float("inf")):
                raise InvalidArgument(f"{key} must be a finite number >= 0", f"adam_params.{key}")
        async with self._backend._gate:
            metrics = await self._backend._worker.run(self.optim_step_sync, state, adam)
        self._dirty.add(name)
        return metrics

    def optim_step_sync(self, state: _ModelState, adam: AdamParams) -> dict[str, float]:
        """Torch thread: the client's optimizer step (on every rank)."""
        self._backend._announce("adam", state.model.name, adam)
        started = time.monotonic()
        # Rows being generated on the live weights finish on them; from now on the live
        # weights are no saved step, so `name@step` is served from its checkpoint.
        old = self._backend._weights_changing(state)
        for group in state.optimizer.param_groups:
            group["betas"] = (adam.beta1, adam.beta2)
            group["eps"] = adam.eps
            group["weight_decay"] = adam.weight_decay
        stats = StepStats()
        optim_step(
            state.optimizer,
            adam.learning_rate,
            stats,
            max_grad_norm=adam.grad_clip_norm,
            ranks=self._backend.ranks,
        )
        self._backend._weights_changed(state, -1, old)
        return {
            "grad_norm:mean": stats.grad_norms[-1],
            "learning_rate:mean": adam.learning_rate,
            "step_seconds:mean": time.monotonic() - started,
        }

    async def save(self, name: str) -> int:
        """The client's weights as a checkpoint (with the optimizer state), served as
        `name@step`: a new step when they changed since the last save, else that one."""
        state = self._state(name)
        if name not in self._dirty and state.step >= 0:
            return state.step
        backend = self._backend
        async with backend._gate:
            step = await backend._worker.run(self._save_sync, state)
            await backend._publish(state, step)
        self._dirty.discard(name)
        return step

    def _save_sync(self, state: _ModelState) -> int:
        step = max(state.step, checkpoints.latest_step(state.output_dir)) + 1
        checkpoints.save_checkpoint(
            state.peft_model, state.output_dir, step, state.optimizer.state_dict()
        )
        precision.release_cached_memory(self._backend.device)
        self._backend._weights_changed(state, step, None)
        return step

    async def load(self, name: str, checkpoint: Path, *, optimizer: bool) -> None:
        """Another checkpoint's weights (and optimizer state) into the client."""
        state = self._state(name)
        if not (checkpoint / ADAPTER_CONFIG).is_file():
            raise NotFound(f"no saved weights at {checkpoint.name}")
        async with self._backend._gate:
            await self._backend._worker.run(self._load_sync, state, checkpoint, optimizer)
        self._dirty.add(name)

    def _load_sync(self, state: _ModelState, checkpoint: Path, optimizer: bool) -> None:
        weights = load_file(str(checkpoint / ADAPTER_WEIGHTS), device=str(self._backend.device))
        mismatched = _mismatched_shapes(weights, state.peft_model.adapter_state())
        if mismatched:
            raise FailedPrecondition(
                f"the saved weights do not fit this client's LoRA ({mismatched}): "
                "load them into a client of the same rank"
            )
        old = self._backend._weights_changing(state)
        state.peft_model.load_adapter_state(weights)
        if optimizer:
            saved = checkpoints.load_optimizer_state(checkpoint)
            if saved is None:  # weights saved before any step: the optimizer's fresh state
                state.optimizer.state.clear()
            else:
                state.optimizer.load_state_dict(saved)
        self.sync_ranks(state, optimizer)
        self._backend._weights_changed(state, -1, old)

    def sync_ranks(self, state: _ModelState, optimizer: bool) -> None:
        """Torch thread: the other ranks take rank 0's weights (and optimizer state)."""
        ranks = self._backend.ranks
        if ranks is None:
            return
        self._backend._announce("sync", state.model.name, optimizer)
        state.peft_model.activate()
        params = state.optimizer.param_groups[0]["params"]
        saved = ranks.sync_from_leader(params, state.optimizer.state_dict() if optimizer else None)
        if saved is not None and not ranks.leader:
            state.optimizer.load_state_dict(saved)

    async def release(self, name: str) -> None:
        """Drop the client from memory; its checkpoints stay on disk."""
        await self._backend.unregister(name)
        self._dirty.discard(name)
        self._contexts.pop(name, None)


def _mismatched_shapes(saved: Mapping[str, Any], live: Mapping[str, Any]) -> str:
    """`saved` and `live` both keyed as peft saves an adapter (no adapter name)."""
    for key, tensor in saved.items():
        target = live.get(key)
        if target is None:
            return f"{key} has no counterpart"
        if tuple(target.shape) != tuple(tensor.shape):
            return f"{key} is {tuple(tensor.shape)}, here {tuple(target.shape)}"
    return ""
