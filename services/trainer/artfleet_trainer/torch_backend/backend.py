"""`TorchBackend`: ART's Backend protocol on plain torch + peft (CPU or any torch device).

A job runner speaks only ART:

    backend = TorchBackend(path=".art", api_key=key)
    model = art.TrainableModel(name="agent", project="demo", base_model="smollm2-135m-instruct")
    await model.register(backend)          # loads weights, resumes the latest checkpoint,
                                           # serves it (`serving`: its own server by default)
    client = model.openai_client()         # rollouts call it with model.get_inference_name()
    result = await backend.train(model, groups, learning_rate=5e-5)

Model work runs on one dedicated torch thread (the event loop and the server stay
responsive), and one FIFO gate keeps generation and training from touching the model
at the same time. How the policy is served is one `PolicyServing` (artfleet_trainer.serving):
the trainer's own server on the live weights (torch_serving), or the inference service.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import torch
from peft import LoraConfig

from artfleet.contracts.checkpoint_layout import ADAPTER_CONFIG, delete_steps_after
from artfleet.contracts.gpu_plan import ModelShape
from artfleet.contracts.gpu_tenants import tenant_bytes
from artfleet_trainer.backends.art_compat import art
from artfleet_trainer.serving import PolicyServing
from artfleet_trainer.settings import DtypeName
from artfleet_trainer.torch_serving.options import TorchServerOptions

from . import checkpoints, precision, train_config, training
from .full_model import FullModel, full_finetuning
from .full_runs import FullRuns
from .model_loader import LoadedModel, load_base_model
from .model_state import ModelState as _ModelState
from .model_state import portable
from .ranks import RankGroup, RankOp
from .sft_runs import SftRuns
from .tenants import BaseLoader, SharedBases, TenantModel, lora_seed, peft_args
from .training_clients import TrainingClients
from .turn_gate import TurnGate
from .worker import TorchWorker, training_thread_scope

MiB, GiB = 1024**2, 1024**3
# Kept free for a step's activations when no budget is set (a CPU's default budget).
DEFAULT_STEP_RESERVE_BYTES = 2 * GiB

log = logging.getLogger(__name__)
T = TypeVar("T")


class TorchBackend:
    """ART Backend on HF transformers + peft LoRA; its policies served through one
    `PolicyServing`."""

    def __init__(
        self,
        path: str = ".art",
        device: str = "cpu",
        *,
        api_key: str | None = None,
        cache_dir: str | None = None,
        lora_rank: int = 8,
        dtype: DtypeName = "auto",
        num_threads: int | None = None,
        train_num_threads: int | None = None,
        activation_budget_bytes: int | None = None,
        memory_fraction: float = 0.0,
        serving: PolicyServing | TorchServerOptions | None = None,
        loader: BaseLoader | None = None,
        ranks: RankGroup | None = None,
    ) -> None:
        """`api_key` guards the trainer's own server (a random one when None;
        `_prepare_backend_for_training` returns it).
        `num_threads` (torch threads for loading and generation) defaults to all cores
        but one; `train_num_threads` to all cores when the machine is otherwise idle at
        the start of a step, else all but one (see worker.py for the measurements).
        `dtype`: the base model's (`auto`: bf16 on CUDA, fp32 on a CPU; precision.py).
        `activation_budget_bytes` bounds the activations a training row keeps for the
        backward pass: a row within it recomputes nothing, a larger one checkpoints just
        enough decoder layers (activation_memory.py); 0 checkpoints every layer; None
        takes the device's (2 GiB on a CPU, the free memory on CUDA at each step).
        `memory_fraction` (CUDA, 0 = no limit): the trainer's share of the GPU, which its
        allocator may not exceed (the rest is vLLM's).
        `serving`: the engine that serves the policy (artfleet_trainer.serving: the
        inference service, to which every saved checkpoint is published), or the options
        of the trainer's own server on the live weights (the default).
        `loader`: how a base model is loaded (default: `load_base_model` from the embedded
        default or a local folder; the device check builds random-init models instead).
        `ranks`: the process group this backend's model work runs on (ranks.py; started),
        data parallel with the base sharded; rank 0 is the backend that serves and saves,
        the others follow it (rank_follower.py). None: this process alone."""
        self._path = path
        self.ranks = ranks
        self.leads = ranks is None or ranks.leader  # writes checkpoints, publishes
        if ranks is not None:
            device = ranks.device(device)
            if not precision.is_cuda(device):  # the ranks of a node split its cores
                num_threads = num_threads or ranks.cpu_threads()
                train_num_threads = train_num_threads or ranks.cpu_threads()
            if serving is None or isinstance(serving, TorchServerOptions):
                raise ValueError(
                    "a trainer on several ranks serves its policies through the inference "
                    "service (ARTFLEET_INFERENCE_ENGINE=vllm): its own server would need "
                    "every rank for each generated token"
                )
        self.device = device
        self.dtype = precision.resolve_dtype(dtype, device)
        self.memory_fraction = memory_fraction
        precision.configure_device(device)
        if memory_fraction > 0 and precision.is_cuda(device):
            torch.cuda.set_per_process_memory_fraction(memory_fraction, torch.device(device))
        self._load_raw = loader or self._load_from_disk  # the base as it is
        self._loader = self._load_base  # the base as tenants share it (sharded on ranks)
        self.cache_dir = cache_dir
        self.lora_rank = lora_rank
        self.api_key = api_key or secrets.token_urlsafe(24)
        # every torch op of this backend runs there
        self._worker = TorchWorker(num_threads, ranks.lost if ranks is not None else None)
        self.train_num_threads = train_num_threads  # None: decided per step, see worker.py
        self.activation_budget_bytes = activation_budget_bytes
        self._states: dict[str, _ModelState] = {}
        self.bases = SharedBases(self._loader)  # one base in memory per name, for all tenants
        # Generation slices, training steps and Tinker calls take turns (turn_gate.py).
        self._gate = TurnGate()
        if serving is None or isinstance(serving, TorchServerOptions):
            serving = self._own_server(serving or TorchServerOptions())
        self.serving: PolicyServing = serving
        Path(path).mkdir(parents=True, exist_ok=True)
        self.training_clients = TrainingClients(self)  # the Tinker-compatible API's clients
        self.sft = SftRuns(self)  # SFT batches and losses
        self.full = FullRuns(self)  # full fine-tunes (finetune: full)

    @property
    def path(self) -> str:
        return self._path

    async def __aenter__(self) -> TorchBackend:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    def _load_from_disk(self, base_model: str) -> LoadedModel:
        return load_base_model(
            base_model, cache_dir=self.cache_dir, device=self.load_device, dtype=self.dtype
        )

    @property
    def load_device(self) -> str:
        """Where a base is read to: CUDA ranks read it into host memory and FSDP moves
        each unit to the GPU as it shards it, so a GPU never holds more than its shards
        and one unit whole (a 70B base whole would not fit one 80 GB GPU)."""
        return "cpu" if self.ranks is not None else self.device

    def _load_base(self, base_model: str) -> LoadedModel:
        loaded = self._load_raw(base_model)
        if self.ranks is not None:
            self.ranks.shard(loaded.model)
        return loaded

    def _announce(self, op: str, *args: Any) -> None:
        """Torch thread, rank 0: the followers run `op` too, next (ranks.py)."""
        if self.ranks is not None and self.ranks.leader:
            self.ranks.announce(RankOp(op, args))

    def _own_server(self, options: TorchServerOptions) -> PolicyServing:
        from artfleet_trainer.torch_serving.service import TorchServing

        return TorchServing(
            options,
            path=self._path,
            api_key=self.api_key,
            worker=self._worker,
            gate=self._gate,
            loader=self._loader,
            lora_rank=self.lora_rank,
        )

    @property
    def base_url(self) -> str | None:
        """The policy's OpenAI base URL for rollouts, once served."""
        return self.serving.public_url()

    async def sampling_endpoint(self) -> tuple[str, str]:
        """(OpenAI base URL, key) where the trainer itself samples its policies."""
        return await self.serving.sampling_endpoint()

    async def start_serving(self) -> None:
        """Serve before any job registers (evaluations of finished jobs' checkpoints)."""
        await self.serving.start()

    @property
    def group_broken(self) -> bool:
        """Its ranks' group broke: the process must exit with a failure (torchrun then
        restarts the group)."""
        return self.ranks is not None and self.ranks.broken

    async def close(self) -> None:
        await self.serving.stop()
        if self.ranks is not None:
            await self._worker.run(self.ranks.stop)
        self._worker.shutdown()

    async def run_on_torch_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on this backend's torch thread (where all its model work runs)."""
        return await self._worker.run(fn, *args)

    # --- registration and steps -------------------------------------------------------

    async def register(self, model: art.Model, *, first_checkpoint: bool = True) -> None:
        """`first_checkpoint`: a new model's initial weights are saved (and served) as
        step 0; a Tinker client's are not, its first checkpoint is its first save."""
        model.base_path = self._path
        output_dir = checkpoints.model_dir(self._path, model)
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "model.json").write_text(json.dumps(model.model_dump(), default=str))
        if not isinstance(model, art.TrainableModel) or not model.trainable:
            return  # nothing to train or serve: the path is all a plain Model needs
        existing = self._states.get(model.name)
        if existing is not None:
            if existing.output_dir != output_dir:
                raise ValueError(f"a model named {model.name!r} is already registered")
            existing.model = model
            return
        state = await self._worker.run(self._load_state, model, output_dir, first_checkpoint)
        self._states[model.name] = state
        if state.step >= 0:
            await self._publish(state, state.step)

    async def unregister(self, name: str) -> None:
        """Forget the model `name` (its weights leave memory; its checkpoints stay)."""
        state = self._states.pop(name, None)
        if state is not None:
            await self.serving.detach(name)
            async with self._gate:  # no step or generation slice uses the adapter now
                await self._worker.run(self.release_tenant, name, state.model.base_model)
            await self._worker.run(precision.release_cached_memory, self.device)

    async def _publish(self, state: _ModelState, step: int) -> None:
        """The saved checkpoint `step` is the policy the engine serves from now on."""
        checkpoint = checkpoints.checkpoint_dir(state.output_dir.absolute(), step)
        await self.serving.publish(state.model.name, step, checkpoint, state.model.base_model)

    def follow_tenant(
        self, model: art.TrainableModel, output_dir: Path, first: bool, lora: LoraConfig
    ) -> None:
        """Torch thread of a follower rank: rank 0's new tenant here too, its adapter of
        rank 0's config (rank_follower.py)."""
        self._states[model.name] = self._load_state(model, output_dir, first, lora)

    def state_named(self, name: str) -> _ModelState:
        return self._states[name]

    def release_tenant(self, name: str, base_model: str) -> None:
        """Torch thread: the tenant's adapter leaves the base (on every rank)."""
        self._announce("release", name, base_model)
        state = self._states.pop(name, None)
        if state is None or not isinstance(state.peft_model, FullModel):
            self.bases.release(name, base_model)

    def _weights_changing(self, state: _ModelState) -> object | None:
        """Torch thread, before the weights change (see PolicyServing.weights_changing);
        the tenant's adapter is the active one from here to the end of the change."""
        state.peft_model.activate()
        return self.serving.weights_changing(state.model.name)

    def _weights_changed(self, state: _ModelState, step: int, before: object | None) -> None:
        """Torch thread: the live weights are `step` now (-1: not a saved step)."""
        state.step = step
        self.serving.weights_changed(state.model.name, step, before)

    def _rank(self, model: art.TrainableModel) -> int:
        """The model's own LoRA rank (ART's `_internal_config.peft_args.r`), else ours."""
        return int(peft_args(model).get("r", self.lora_rank))

    def _load_state(
        self,
        model: art.TrainableModel,
        output_dir: Path,
        first_checkpoint: bool = True,
        lora: LoraConfig | None = None,
    ) -> _ModelState:
        """Torch thread: the model as a tenant of its base (loaded once, whatever the
        number of tenants) with the latest adapter and optimizer state, if any. `lora`: a
        follower rank's, rank 0's adapter config (a resumed one's is its checkpoint's).
        A full fine-tune (`full_finetuning`) is a model of its own instead."""
        step = checkpoints.latest_step(output_dir)
        latest = checkpoints.checkpoint_dir(output_dir, step)
        if full_finetuning(model):
            return self.full.register(model, output_dir, latest, first_checkpoint)
        # a restarted trainer goes on from it (rank 0 reads it, the other ranks receive it)
        resume = self.leads and (latest / ADAPTER_CONFIG).is_file()
        if lora is None and resume:
            lora = LoraConfig.from_pretrained(str(latest))
            lora.inference_mode = False  # saved as True; trainable, as rank 0 loads it
        elif lora is None:
            lora = training.lora_config(self._rank(model))
        self._announce("tenant", portable(model), output_dir, first_checkpoint, lora)
        with training.quiet_peft_wrap():
            tenant, base, load_seconds = self.bases.tenant(
                model.name,
                model.base_model,
                lora,
                latest if resume else None,
                lora_seed(model),
            )
        optimizer = training.make_optimizer(list(tenant.parameters()))
        optimizer_state = checkpoints.load_optimizer_state(latest) if resume else None
        if self.ranks is not None:
            optimizer_state = self.ranks.sync_from_leader(
                optimizer.param_groups[0]["params"], optimizer_state
            )
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
        if not self.leads:
            step = -1
        elif not resume and first_checkpoint:  # step 0 on disk, reloaded as any other step
            checkpoints.save_checkpoint(tenant, output_dir, 0)
        elif not resume:
            step = -1  # the live weights are no saved step
        log.info(
            "registered %s at step %d (%s; tenants of %s: %d)",
            model.name,
            step,
            f"{load_seconds:.1f}s to load the base" if load_seconds else "base in memory",
            model.base_model,
            len(base.tenants),
        )
        return self._attached(model, tenant, base.tokenizer, optimizer, output_dir, step)

    def _attached(
        self,
        model: art.TrainableModel,
        trained: TenantModel | FullModel,
        tokenizer: Any,
        optimizer: torch.optim.AdamW,
        output_dir: Path,
        step: int,
    ) -> _ModelState:
        """A loaded model's state, its policy attached to the serving engine."""
        config = trained.get_base_model().config
        max_context = int(getattr(config, "max_position_embeddings", 0) or 4096)
        self.serving.attach(model.name, trained, tokenizer, step)
        return _ModelState(model, trained, tokenizer, optimizer, output_dir, max_context, step)

    def save_checkpoint(self, state: _ModelState, step: int) -> Path:
        """Torch thread, rank 0: the live weights as checkpoint `step` (rank 0 writes a
        LoRA's; a full fine-tune's on ranks is written by every rank, its shard)."""
        if isinstance(state.peft_model, FullModel):
            return self.full.save(state, step)
        return checkpoints.save_checkpoint(
            state.peft_model, state.output_dir, step, state.optimizer.state_dict()
        )

    # --- tenants --------------------------------------------------------------------------

    def set_priority(self, model: art.Model, priority: int) -> None:
        """The model's training steps wait at the gate at `priority` (higher first; every
        turn passed over adds one, so no tenant starves: turn_gate.py)."""
        self._state_of(model).priority = priority

    def running_jobs_default(self) -> int:
        """Jobs side by side when the settings leave it to the device: 2 on a CPU (both
        phases share its cores), one per 16 GiB of a GPU, 2 to 8 (a tenant's adapter and
        optimizer are small; the bound is one step's activations at a time)."""
        if not precision.is_cuda(self.device):
            return 2
        total = torch.cuda.get_device_properties(torch.device(self.device)).total_memory
        return max(2, min(8, total // (16 * GiB)))

    def tenant_room(self, rank: int) -> tuple[int, str]:
        """How many more rank-`rank` tenants the device's free memory holds beside one
        step's activations, and the figures (for a refusal). Before any base is loaded
        its shape is unknown: room for one (loading it is the test)."""
        if not len(self.bases):
            return 1, "no base model loaded yet"
        shape = ModelShape.from_config(self.bases.any_config())
        each = tenant_bytes(shape, rank)
        reserve = self.activation_budget_bytes or DEFAULT_STEP_RESERVE_BYTES
        free = precision.free_memory_bytes(self.device) - reserve
        room = max(0, free) // each
        figures = (
            f"{free / GiB:.1f} GiB free beside one step, {each / MiB:.0f} MiB a rank-{rank} tenant"
        )
        return int(room), figures

    def _state_of(self, model: art.Model) -> _ModelState:
        state = self._states.get(model.name)
        if state is None:
            raise ValueError(f"model {model.name!r} is not registered with this TorchBackend")
        return state

    def _model_inference_name(self, model: art.Model, step: int | None = None) -> str:
        if step is None:
            state = self._states.get(model.name)
            if state is not None:
                step = state.step
            elif isinstance(model, art.TrainableModel):
                step = checkpoints.latest_step(checkpoints.model_dir(self._path, model))
            else:
                step = 0
        return f"{model.name}@{step}"

    async def _get_step(self, model: art.TrainableModel) -> int:
        return checkpoints.latest_step(checkpoints.model_dir(self._path, model))

    # --- the job runner's interface (artfleet_trainer.backends.TrainerBackend) ----------

    async def register_model(self, model: art.TrainableModel) -> None:
        await model.register(self)

    async def current_step(self, model: art.TrainableModel) -> int:
        return await self._get_step(model)

    async def discard_checkpoints_after(self, model: art.TrainableModel, step: int) -> list[int]:
        """Checkpoints past `step` are deleted; a model registered here (an in-process
        retry) leaves memory, so that registering it again loads `step`."""
        output_dir = checkpoints.model_dir(self._path, model)
        if model.name in self._states and checkpoints.latest_step(output_dir) > step:
            await self.unregister(model.name)
        return await self._worker.run(delete_steps_after, output_dir, step)

    async def _delete_checkpoint_files(
        self, model: art.TrainableModel, steps_to_keep: list[int]
    ) -> None:
        keep = set(steps_to_keep)
        state = self._states.get(model.name)
        if state is not None:
            keep.add(state.step)  # never the step being served
        output_dir = checkpoints.model_dir(self._path, model)
        await self._worker.run(checkpoints.delete_checkpoints, output_dir, keep)

    async def retire_checkpoints(self, model: art.Model, steps: list[int]) -> None:
        """Checkpoints deleted by retention: the inference service stops serving them."""
        await self.retire_steps(model.name, steps)

    async def retire_steps(self, name: str, steps: list[int]) -> None:
        """Checkpoints of the model `name` deleted (retention, `models prune|delete`): the
        engine stops serving them."""
        await self.serving.retire(name, steps)

    async def _prepare_backend_for_training(
        self, model: art.TrainableModel, config: Any = None
    ) -> tuple[str, str]:
        """Serve (once) and return (base_url, api_key)."""
        if config:
            log.debug("TorchBackend ignores the OpenAI server config %r", config)
        return await self.serving.endpoint()

    # --- training ------------------------------------------------------------------------

    async def train(
        self,
        model: art.TrainableModel,
        trajectory_groups: Iterable[art.TrajectoryGroup],
        *,
        learning_rate: float | None = None,
        **kwargs: Any,
    ) -> art.types.TrainResult:
        """One GRPO step on `trajectory_groups`; saves checkpoint step+1 and serves it.

        Accepts LocalBackend's loss options (loss_fn, kl_penalty_coef, epsilon, ...,
        packed_sequence_length, grad_accumulation_sequences) and `sequence_mask_band` (the
        sequence_mask off-policy correction, torch_backend/correction.py); others raise
        TypeError.
        """
        if learning_rate is None:  # optional only in ART's Backend signature: no second default
            raise TypeError("train() needs learning_rate (the job spec's)")
        state = self._state_of(model)
        groups = list(trajectory_groups)
        config, dev_config = train_config.build_train_configs(learning_rate, kwargs)
        async with self._gate.turn(state.priority):
            result = await self._worker.run(self._train_sync, state, groups, config, dev_config)
            await self._publish(state, result.step)
        return result

    def _train_sync(
        self,
        state: _ModelState,
        groups: list[art.TrajectoryGroup],
        config: art.types.TrainConfig,
        dev_config: art.dev.TrainConfig,
    ) -> art.types.LocalTrainResult:
        started = time.monotonic()
        old = self._weights_changing(state)
        max_context = state.max_context
        batch = training.pack_trajectory_groups(
            state.tokenizer, groups, dev_config, max_context=max_context
        )
        stats = training.StepStats.for_step(dev_config)
        if batch is not None:
            stats = self.train_packed(state, batch.tensors, config, dev_config)
            log.info(
                "trained %d rows of %s tokens; decoder layers checkpointed per row: %s",
                batch.tensors["tokens"].shape[0],
                (batch.tensors["group_ids"] != -1).sum(dim=1).tolist(),
                stats.checkpointed_layers,
            )
        else:
            log.info("no trainable data (equal rewards in every group): weights unchanged")
        new_step = max(state.step, checkpoints.latest_step(state.output_dir)) + 1
        path = self.save_checkpoint(state, new_step)
        precision.release_cached_memory(self.device)
        # Saved first: the checkpoint must hold the new weights.
        self._weights_changed(state, new_step, old)
        metrics = {
            **stats.summary(),
            "trained_sequences": float(batch.num_results if batch else 0),
            "tokens": float((batch.tensors["group_ids"] != -1).sum()) if batch else 0.0,
            "trainable_tokens": float(batch.tensors["assistant_mask"].sum()) if batch else 0.0,
            "learning_rate": config.learning_rate,
            "train_seconds": time.monotonic() - started,
        }
        return art.types.LocalTrainResult(step=new_step, metrics=metrics, checkpoint_path=str(path))

    def train_packed(
        self,
        state: _ModelState,
        tensors: training.PackedTensors,
        config: art.types.TrainConfig,
        dev_config: art.dev.TrainConfig,
    ) -> training.StepStats:
        """Torch thread: the GRPO step's model work on packed rows (on every rank)."""
        self._announce("train", state.model.name, tensors, config, dev_config)
        with training_thread_scope(self.device, self.train_num_threads):
            return training.train_on_packed(
                state.peft_model,
                state.optimizer,
                tensors,
                config,
                dev_config,
                activation_budget_bytes=self.activation_budget_bytes,
                memory_fraction=self.memory_fraction,
                ranks=self.ranks,
            )

    async def _train_sft(
        self,
        model: art.TrainableModel,
        trajectories: Iterable[art.Trajectory],
        config: art.types.TrainSFTConfig,
        dev_config: art.dev.TrainSFTConfig,
        verbose: bool = False,
        *,
        max_length: int = 0,
    ) -> AsyncIterator[dict[str, float]]:
        """ART's SFT protocol (what `model.train_sft` drives): `SftRuns.train`."""
        async for metrics in self.sft.train(
            model, trajectories, config, verbose, max_length=max_length
        ):
            yield metrics

    async def train_sft(
        self,
        model: art.TrainableModel,
        trajectories: list[art.Trajectory],
        *,
        learning_rate: float,
        batch_size: int,
        max_length: int = 0,
    ) -> AsyncIterator[dict[str, float]]:
        """The job runner's SFT call (artfleet_trainer.backends.TrainerBackend)."""
        config = art.types.TrainSFTConfig(learning_rate=learning_rate, batch_size=batch_size)
        async for metrics in self.sft.train(model, trajectories, config, max_length=max_length):
            yield metrics

    async def sft_loss(
        self, model: art.TrainableModel, trajectories: list[art.Trajectory]
    ) -> float:
        """Mean cross-entropy per assistant token of `trajectories` under the current
        weights (no update; tests and reports)."""
        return await self.sft.loss(model, trajectories)

    # --- for tests and the job runner ------------------------------------------------------

    def peft_model_of(self, model: art.Model) -> Any:
        """The live peft model (tests compare LoRA weights before and after train())."""
        return self._state_of(model).peft_model

    def tokenizer_of(self, model: art.Model) -> Any:
        """The tokenizer the model's trajectories are tokenized with (benchmarks)."""
        return self._state_of(model).tokenizer

    def served_step(self, model: art.Model) -> int:
        return self._state_of(model).step
