"""The Tinker-compatible API's JSON bodies onto the trainer's TinkerApi
messages, and its replies back into the JSON its clients validate strictly (every
field they require, datetimes as ISO text). forward_backward's bodies: fwdbwd.py; a
future's results: results.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from artfleet.v1 import tinker_api_pb2 as pb
from artfleet_api.tinker_api import bodies as b
from artfleet_api.tinker_api.errors import WireError
from artfleet_api.tinker_api.fwdbwd import text_tokens

ADAM = ("adam", "adamw")
OWNER = "artfleet"  # runs have no owner here: one fleet, one token
ADAM_CONFIG = {"type": "adamw"}


def _strings(metadata: dict[str, Any] | None) -> dict[str, str]:
    """User metadata as the trainer keeps it: text values as they are, others as JSON."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in (metadata or {}).items()}


def _adam_only(config: b.OptimizerConfigBody | None, field: str) -> None:
    if config is not None and config.type not in ADAM:
        raise WireError(f"{field}.type: {config.type!r} is not served (Adam only)")


def session_request(body: b.CreateSessionBody) -> pb.CreateTrainingSessionRequest:
    return pb.CreateTrainingSessionRequest(
        tags=body.tags, user_metadata=_strings(body.user_metadata), sdk_version=body.sdk_version
    )


def create_model_call(body: b.CreateModelBody) -> pb.TrainingCall:
    if body.lora_config is None:
        raise WireError("lora_config: required (this server trains LoRA adapters only)")
    _adam_only(body.optimizer_config, "optimizer_config")
    op = pb.CreateModelOp(
        model_seq_id=body.model_seq_id,
        base_model=body.base_model,
        user_metadata=_strings(body.user_metadata),
        **body.lora_config.model_dump(),  # the op carries the LoRA config's fields flat
    )
    return pb.TrainingCall(session_id=body.session_id, create_model=op)


def optim_step_call(body: b.OptimStepBody) -> pb.TrainingCall:
    params = body.params
    if params.type is not None and params.type not in ADAM:
        raise WireError(f"optimizer_params.type: {params.type!r} is not served (Adam only)")
    adam = pb.AdamParams(**params.model_dump(exclude={"type"}))  # the message's fields
    op = pb.OptimStepOp(adam=adam)
    return pb.TrainingCall(model_id=body.model_id, seq_id=body.seq_id, optim_step=op)


def _name(path: str | None) -> str:
    # Names become the last segment of tinker://<run>/<kind>/<name>: one segment.
    if path and "/" in path:
        raise WireError(f"path: {path!r} is a checkpoint's name and cannot hold '/'")
    return path or ""


def save_weights_call(body: b.SaveWeightsBody) -> pb.TrainingCall:
    op = pb.SaveWeightsOp(name=_name(body.path), overwrite=body.overwrite)
    return pb.TrainingCall(model_id=body.model_id, seq_id=body.seq_id, save_weights=op)


def save_for_sampler_call(body: b.SaveForSamplerBody) -> pb.TrainingCall:
    if body.kind != "snapshot":
        raise WireError(f"kind: {body.kind!r} is not served (snapshot only)")
    if body.path is None and body.sampling_session_seq_id is None:
        raise WireError("path or sampling_session_seq_id: one is required")
    op = pb.SaveForSamplerOp(
        name=_name(body.path), sampling_session_seq_id=body.sampling_session_seq_id
    )
    return pb.TrainingCall(model_id=body.model_id, seq_id=body.seq_id, save_for_sampler=op)


def load_weights_call(body: b.LoadWeightsBody) -> tuple[pb.TrainingCall, str | None]:
    """The call, and the model id the client takes for granted when the load creates
    its training client (`<session>:train:<n>`); None for a load onto a model."""
    _adam_only(body.optimizer_config, "optimizer_config")
    if body.base_model is not None:
        raise WireError("base_model: not served on load_weights (the checkpoint names it)")
    if body.weights_access_token is not None:
        raise WireError("weights_access_token: not served (one fleet, one token)")
    op = pb.LoadWeightsOp(path=body.path, optimizer=body.optimizer)
    legacy = body.model_id is not None and body.seq_id is not None
    creates = body.session_id is not None and body.model_seq_id is not None
    if legacy == creates:
        raise WireError(
            "load_weights: either model_id with seq_id, or session_id with model_seq_id"
        )
    if legacy:
        return pb.TrainingCall(model_id=body.model_id, seq_id=body.seq_id, load_weights=op), None
    op.model_seq_id = body.model_seq_id or 0
    call = pb.TrainingCall(session_id=body.session_id, load_weights=op)
    return call, f"{body.session_id}:train:{body.model_seq_id}"


UNSERVED_SAMPLE_FIELDS = (
    "topk_prompt_logprobs",
    "topk_sample_logprobs",
    "target_prompt_logprobs",
    "prompt_alt_tokens_k",
    "prompt_logprobs_last_n",
    "record_stability_info",
)


def sample_call(body: b.SampleBody) -> pb.TrainingCall:
    for field in UNSERVED_SAMPLE_FIELDS:  # defaults are 0, None or false
        if getattr(body, field):
            raise WireError(f"{field}: not served by this server")
    if not body.sampling_session_id:
        raise WireError("sampling_session_id: required (create_sampling_session gives one)")
    op = pb.SampleOp(
        sampling_session_id=body.sampling_session_id,
        prompt=text_tokens(body.prompt.chunks, "prompt"),
        num_samples=body.num_samples,
        params=_sampling_params(body.sampling_params),
        prompt_logprobs=bool(body.prompt_logprobs),
    )
    return pb.TrainingCall(seq_id=body.seq_id, sample=op)


def _sampling_params(params: b.SamplingParamsBody) -> pb.SamplingParams:
    out = pb.SamplingParams(
        max_tokens=params.max_tokens or 0,
        seed=params.seed,
        temperature=params.temperature,
        top_k=params.top_k,
        top_p=params.top_p,
    )
    stop = params.stop
    if stop is None:  # the model's own end of turn
        return out
    out.stop_set = True  # an empty list: no stop at all, up to max_tokens
    stops = [stop] if isinstance(stop, str) else stop
    for item in stops:
        if isinstance(item, str):
            out.stop_strings.append(item)
        else:
            out.stop_tokens.append(item)
    return out


def sampling_session_request(
    body: b.CreateSamplingSessionBody,
) -> pb.CreateSamplingSessionRequest:
    if not (body.model_path or body.base_model):
        raise WireError("model_path or base_model: one is required")
    return pb.CreateSamplingSessionRequest(
        session_id=body.session_id,
        sampling_session_seq_id=body.sampling_session_seq_id,
        model_path=body.model_path or "",
        base_model=body.base_model or "",
    )


def info_json(info: pb.TrainingClientInfo) -> dict[str, Any]:
    model_data = {
        "arch": info.arch or None,
        "model_name": info.base_model,
        "tokenizer_id": info.tokenizer_id or None,
    }
    return {
        "type": "get_info",
        "model_id": info.model_id,
        "model_data": model_data,
        "model_name": info.base_model,
        "is_lora": True,
        "lora_rank": info.lora_rank,
        "optimizer_config": ADAM_CONFIG,
    }


def sampler_json(session: pb.SamplingSession) -> dict[str, Any]:
    return {
        "sampler_id": session.sampling_session_id,
        "base_model": session.base_model,
        "model_path": session.model_path or None,
    }


def weights_info_json(info: pb.WeightsInfoResponse) -> dict[str, Any]:
    return {
        "base_model": info.base_model,
        "is_lora": True,
        "lora_rank": info.lora_rank,
        "train_unembed": info.train_unembed,
        "train_mlp": info.train_mlp,
        "train_attn": info.train_attn,
        "optimizer_config": ADAM_CONFIG,
    }


def capabilities_json(reply: pb.CapabilitiesResponse) -> dict[str, Any]:
    models = [
        {
            "model_name": m.model_name,
            "max_context_length": m.max_context_length or None,
            "trainable": True,
            "sampleable": True,
        }
        for m in reply.models
    ]
    return {"supported_models": models}


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat()


def checkpoint_json(checkpoint: pb.Checkpoint) -> dict[str, Any]:
    return {
        "checkpoint_id": checkpoint.checkpoint_id,
        "checkpoint_type": checkpoint.checkpoint_type,
        "time": _time(checkpoint.time),
        "tinker_path": checkpoint.tinker_path,
        "size_bytes": checkpoint.size_bytes or None,
        "public": False,
    }


def run_json(run: pb.TrainingRun) -> dict[str, Any]:
    last = run.last_checkpoint if run.HasField("last_checkpoint") else None
    sampler = run.last_sampler_checkpoint if run.HasField("last_sampler_checkpoint") else None
    return {
        "training_run_id": run.training_run_id,
        "base_model": run.base_model,
        "model_owner": OWNER,
        "is_lora": True,
        "corrupted": False,
        "lora_rank": run.lora_rank or None,
        "last_request_time": _time(run.last_request_time),
        "last_checkpoint": None if last is None else checkpoint_json(last),
        "last_sampler_checkpoint": None if sampler is None else checkpoint_json(sampler),
        "user_metadata": dict(run.user_metadata) or None,
    }
