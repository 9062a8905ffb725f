"""The JSON request bodies of the Tinker-compatible API, as its clients
send them: fields they always send are required, unknown fields are ignored (newer
clients add some), defaults are the clients' own."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", protected_namespaces=())


class CreateSessionBody(Body):
    tags: list[str] = Field(default_factory=list)
    user_metadata: dict[str, Any] | None = None
    sdk_version: str = ""


class HeartbeatBody(Body):
    session_id: str


class FinishReason(Body):
    type: str = "success"


class FinishBody(Body):
    reason: FinishReason = Field(default_factory=FinishReason)
    detail: str | None = None


class LoraConfigBody(Body):
    rank: int
    seed: int | None = None
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True


class OptimizerConfigBody(Body):
    type: str = "adamw"


class CreateModelBody(Body):
    session_id: str
    model_seq_id: int
    base_model: str
    user_metadata: dict[str, Any] | None = None
    lora_config: LoraConfigBody | None = None
    optimizer_config: OptimizerConfigBody | None = None


class ModelIdBody(Body):
    model_id: str


class AdamParamsBody(Body):
    type: str | None = None  # only non-Adam optimizers name themselves
    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0


class OptimStepBody(Body):
    # Older clients send adam_params; newer ones optimizer_params for other optimizers.
    params: AdamParamsBody = Field(
        validation_alias=AliasChoices("adam_params", "optimizer_params", "optim_params")
    )
    model_id: str
    seq_id: int


class SaveWeightsBody(Body):
    model_id: str
    seq_id: int
    path: str | None = None  # the checkpoint's name
    ttl_seconds: int | None = None
    overwrite: bool = False


class LoadWeightsBody(Body):
    model_id: str | None = None
    seq_id: int | None = None
    session_id: str | None = None
    model_seq_id: int | None = None
    base_model: str | None = None
    path: str
    optimizer: bool = False
    optimizer_config: OptimizerConfigBody | None = None
    weights_access_token: str | None = None


class SaveForSamplerBody(Body):
    model_id: str
    seq_id: int
    path: str | None = None  # the checkpoint's name; none: an ephemeral save
    sampling_session_seq_id: int | None = None
    kind: str = "snapshot"
    ttl_seconds: int | None = None


class CreateSamplingSessionBody(Body):
    session_id: str
    sampling_session_seq_id: int
    base_model: str | None = None
    model_path: str | None = None


class ChunkBody(Body):
    type: str = "encoded_text"
    tokens: list[int] | None = None


class ModelInputBody(Body):
    chunks: list[ChunkBody]


class SamplingParamsBody(Body):
    # None: the trainer's default; 0 or less would sample nothing (refused, not served).
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: str | list[int] | list[str] | None = None
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0


class SampleBody(Body):
    num_samples: int = 1
    prompt: ModelInputBody
    sampling_params: SamplingParamsBody
    sampling_session_id: str | None = None
    seq_id: int
    prompt_logprobs: bool | None = None
    topk_prompt_logprobs: int = 0
    topk_sample_logprobs: int = 0
    target_prompt_logprobs: dict[str, Any] | None = None
    prompt_alt_tokens_k: int = 0
    prompt_logprobs_last_n: int | None = None
    record_stability_info: bool | None = None


class RetrieveBody(Body):
    request_id: str
    allow_metadata_only: bool = False


class WeightsInfoBody(Body):
    tinker_path: str


class TensorBody(Body):
    """A TensorData in JSON: flat row-major values; sparse CSR when the indices come."""

    data: list[int | float]
    dtype: str
    shape: list[int] | None = None
    sparse_crow_indices: list[int] | None = None
    sparse_col_indices: list[int] | None = None


class DatumBody(Body):
    model_input: ModelInputBody
    loss_fn_inputs: dict[str, TensorBody]


class ForwardBackwardInputBody(Body):
    data: list[DatumBody]
    loss_fn: str
    loss_fn_config: dict[str, float | str] | None = None


class ForwardBackwardBody(Body):
    forward_backward_input: ForwardBackwardInputBody
    model_id: str
    seq_id: int


class ForwardBody(Body):
    forward_input: ForwardBackwardInputBody
    model_id: str
    seq_id: int
