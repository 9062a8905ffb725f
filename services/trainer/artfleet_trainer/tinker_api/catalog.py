"""The Tinker-compatible API's checks of what it does not serve, and its listings (runs,
checkpoints, samplers, base models) as proto messages."""

from __future__ import annotations

import math
import shutil

from artfleet.contracts import checkpoint_layout
from artfleet.contracts.errors import InvalidArgument, NotFound
from artfleet.v1 import tinker_api_pb2 as pb
from artfleet_trainer.torch_backend.training_clients import TrainingClients

from .runs import KINDS, RunRecord, Runs, SavedWeights, run_name, tinker_path
from .sampler import DEFAULT_MAX_TOKENS
from .sessions import Sampler

MAX_RANK = 256


def check_lora(op: pb.CreateModelOp) -> None:
    """Refused by name: what the torch backend's LoRA does not do. It trains the attention
    and MLP projections; the unembedding is never trained (`train_unembed` is accepted
    and does nothing, as the clients that set it false rely on)."""
    if not 1 <= op.rank <= MAX_RANK:
        raise InvalidArgument(f"rank must be 1..{MAX_RANK}", "lora_config.rank")
    for field in ("train_mlp", "train_attn"):
        if not getattr(op, field):
            raise InvalidArgument(
                f"{field}=false is not implemented here: LoRA trains the attention and MLP "
                "projections together",
                f"lora_config.{field}",
            )


def check_sample(op: pb.SampleOp) -> None:
    params = op.params
    if not op.prompt:
        raise InvalidArgument("the prompt is empty", "prompt")
    if op.num_samples < 1:
        raise InvalidArgument("num_samples must be at least 1", "num_samples")
    if params.max_tokens < 0:
        raise InvalidArgument("max_tokens must be positive", "sampling_params.max_tokens")
    for field in ("temperature", "top_p"):
        value = getattr(params, field)
        if not math.isfinite(value) or value < 0:
            raise InvalidArgument(
                f"{field} must be a finite number >= 0", f"sampling_params.{field}"
            )


def fit_sample(op: pb.SampleOp, context: int) -> pb.SampleOp:
    """`op` within the context (0: not known), checked here rather than by the engine
    inside the future: a prompt that fills it, or a `max_tokens` that runs past it, is
    refused naming the field. Without `max_tokens` the default is cut to the room left."""
    prompt = len(op.prompt)
    room = context - prompt
    if context <= 0 or (op.params.max_tokens == 0 and room >= DEFAULT_MAX_TOKENS):
        return op
    limit = f"the context of {context} tokens (get_server_capabilities' max_context_length)"
    if room < 1:
        raise InvalidArgument(f"{prompt} tokens leave no room to sample in {limit}", "prompt")
    asked = op.params.max_tokens
    if asked > room:
        raise InvalidArgument(
            f"{asked} past {limit}: the prompt's {prompt} tokens and {asked} more; at most "
            f"{room} here",
            "sampling_params.max_tokens",
        )
    fitted = pb.SampleOp()
    fitted.CopyFrom(op)
    fitted.params.max_tokens = asked or room
    return fitted


def sampling_session(found: Sampler) -> pb.SamplingSession:
    return pb.SamplingSession(
        sampling_session_id=found.sampling_session_id,
        base_model=found.base_model,
        model_path=found.model_path,
    )


def checkpoint(record: RunRecord, saved: SavedWeights, runs: Runs) -> pb.Checkpoint:
    kind = saved.checkpoint_id.split("/", 1)[0]
    size = checkpoint_layout.folder_bytes(runs.checkpoint_dir(record.training_run_id, saved.step))
    return pb.Checkpoint(
        checkpoint_id=saved.checkpoint_id,
        checkpoint_type=KINDS.get(kind, kind),
        time=saved.time,
        tinker_path=tinker_path(record.training_run_id, saved.checkpoint_id),
        size_bytes=size,
        step=saved.step,
    )


def run(record: RunRecord, loaded: bool, runs: Runs) -> pb.TrainingRun:
    out = pb.TrainingRun(
        training_run_id=record.training_run_id,
        base_model=record.base_model,
        lora_rank=record.lora_rank,
        last_request_time=record.last_request_time,
        user_metadata=record.user_metadata,
        loaded=loaded,
    )
    last, last_sampler = record.last("weights"), record.last("sampler_weights")
    if last is not None:
        out.last_checkpoint.CopyFrom(checkpoint(record, last, runs))
    if last_sampler is not None:
        out.last_sampler_checkpoint.CopyFrom(checkpoint(record, last_sampler, runs))
    return out


async def delete_checkpoint(
    runs: Runs, clients: TrainingClients, training_run_id: str, checkpoint_id: str
) -> None:
    """Forget a named save; its fleet checkpoint goes too unless another save of the run
    is that step or its client serves it now."""
    record = runs.get(training_run_id)
    saved = record.save_named(checkpoint_id)
    if saved is None:
        raise NotFound(f"no checkpoint {checkpoint_id!r} in training run {training_run_id!r}")
    record.saves = [s for s in record.saves if s.checkpoint_id != checkpoint_id]
    runs.write(record)
    if any(s.step == saved.step for s in record.saves) or saved.step == 0:
        return
    name = run_name(training_run_id)
    if clients.loaded(name) and clients.served_step(name) == saved.step:
        return
    shutil.rmtree(runs.checkpoint_dir(training_run_id, saved.step), ignore_errors=True)
    await clients.retire(name, saved.step)
