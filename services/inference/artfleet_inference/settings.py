"""Inference settings (`ARTFLEET_INFERENCE_*` and the shared `ARTFLEET_*`), parsed before
anything heavy is imported."""

from __future__ import annotations

import sys
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from artfleet.runtime.config import ServerSettings


class InferenceSettings(ServerSettings):
    """`host`/`port` are the public HTTP endpoint (OpenAI `/v1/...` and the trainer's
    `/artfleet/v1/policies`); vLLM itself listens on loopback only."""

    model_config = SettingsConfigDict(env_prefix="ARTFLEET_", extra="ignore")

    port: int = Field(default=8000, ge=0, le=65535, description="HTTP port; 0 picks a free one")
    inference_model: str = Field(
        default="smollm2-135m-instruct",
        description="base model vLLM serves: the embedded default's name or a local HF folder",
    )
    inference_model_cache_dir: str = Field(
        default="", description="where the embedded default's safetensors copy is kept"
    )
    art_path: str = Field(
        default=".art", description="the trainer's checkpoints (read only: shared volume)"
    )
    inference_workdir: str = Field(
        default=".artfleet/inference", description="merged weights and adapters written here"
    )
    inference_policy_mode: Literal["merged", "lora"] = Field(
        default="merged",
        description="how a new policy reaches vLLM: merged weights reloaded in place "
        "(fastest on CPU) or a runtime LoRA adapter (GPU)",
    )
    inference_vllm_python: str = Field(
        default=sys.executable, description="a Python with vLLM (its own environment)"
    )
    inference_device: Literal["cpu", "cuda"] = Field(default="cpu")
    inference_dtype: str = Field(default="float32")
    inference_max_model_len: int = Field(default=2048, gt=0)
    inference_max_lora_rank: int = Field(
        default=16, gt=0, description="twice the trainer's LoRA rank in merged mode"
    )
    inference_max_loras: int = Field(default=2, gt=0)
    inference_kv_cache_gib: float = Field(default=2.0, gt=0, description="CPU KV cache (GiB)")
    inference_gpu_memory_utilization: float = Field(
        default=0.4, gt=0, le=1, description="GPU share of vLLM when the trainer shares it"
    )
    inference_tool_call_parser: str = Field(default="hermes")
    inference_prefix_caching: bool = Field(default=True)
    inference_extra_args: str = Field(default="", description="more vLLM flags, shell-split")
    inference_start_timeout_s: float = Field(default=600.0, gt=0)
