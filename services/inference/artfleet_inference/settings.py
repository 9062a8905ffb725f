"""Inference settings (`ARTFLEET_INFERENCE_*` and the shared `ARTFLEET_*`), parsed before
anything heavy is imported."""

from __future__ import annotations

import sys
from typing import Annotated, Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from artfleet.runtime.config import ServerSettings

# A number, or "auto": derived from the model's config.json (artfleet.contracts.gpu_plan).
ContextLength = Annotated[int, Field(gt=0)] | Literal["auto"]
GpuShare = Annotated[float, Field(gt=0, le=1)] | Literal["auto"]
KvCacheGib = Annotated[float, Field(gt=0)] | Literal["auto"]


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
    inference_policy_mode: Literal["auto", "merged", "lora"] = Field(
        default="auto",
        description="how a new policy reaches vLLM: merged into vLLM's weights (the newest "
        "policy at base speed; the others as LoRA differences) or a runtime LoRA adapter "
        "per checkpoint; auto: merged on a CPU (vLLM-CPU's LoRA path generates more "
        "slowly), lora on CUDA (measured: docs/inference.md)",
    )
    inference_merge_path: Literal["memory", "disk"] = Field(
        default="memory",
        description="merged mode: how merged weights enter vLLM; memory: vLLM's worker "
        "merges the adapter's factors into the base weights it reads and reloads them in "
        "place (no model folder written); disk: a merged model folder is written, then "
        "vLLM reloads from it",
    )
    inference_vllm_python: str = Field(
        default=sys.executable, description="a Python with vLLM (its own environment)"
    )
    inference_device: Literal["cpu", "cuda"] = Field(default="cpu")
    inference_dtype: str = Field(
        default="",
        description="vLLM's --dtype; empty: float32 on a CPU, auto (the checkpoint's own: "
        "bf16 for Qwen) on CUDA",
    )
    inference_max_model_len: ContextLength = Field(
        default=2048,
        description="vLLM's context in tokens, or auto: from the model's config.json and the "
        "memory (artfleet.contracts.gpu_plan): its max_position_embeddings capped at 32768, "
        "shorter where the KV cache (CPU) or the GPU's split with the trainer needs it",
    )
    inference_max_lora_rank: int = Field(
        default=16, gt=0, description="twice the trainer's LoRA rank in merged mode"
    )
    inference_max_loras: int = Field(
        default=2,
        gt=0,
        description="adapters in one batch (GPU slots of max_lora_rank, preallocated); vLLM's "
        "CPU cache keeps as many as the engine keeps registered (8)",
    )
    inference_tenants: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="policies of different models (jobs side by side, Tinker clients) served "
        "at once as LoRAs; > 0: --max-loras, --max-cpu-loras and --max-lora-rank (rounded up "
        "to vLLM's values) come from artfleet.contracts.gpu_tenants.lora_serving, and the "
        "engine keeps every tenant's policy registered; 0: the two settings above as given",
    )
    inference_kv_cache_gib: KvCacheGib = Field(
        default="auto",
        description="vLLM's CPU KV cache in GiB (fractions allowed: vLLM gets bytes), or "
        "auto: what the machine's available memory (MemAvailable, the cgroup's limit) "
        "holds beside the model and vLLM's processes, at most 2 (artfleet_inference."
        "cpu_memory); checked before vLLM starts",
    )
    inference_gpu_memory_utilization: GpuShare = Field(
        default="auto",
        description="vLLM's share of the GPU's memory when the trainer shares it; auto: "
        "from the model's config.json and the GPU's memory (artfleet.contracts.gpu_plan)",
    )
    inference_gpu_memory_mib: int = Field(
        default=0,
        ge=0,
        description="the GPU's total memory for auto (MiB, as nvidia-smi's memory.total); "
        "0: asked from nvidia-smi",
    )
    inference_tool_call_parser: str = Field(default="hermes")
    inference_reasoning_parser: str = Field(
        default="",
        description="vLLM's --reasoning-parser (e.g. qwen3: the reasoning goes to the "
        "message's reasoning field); empty: none, the reasoning stays in the content",
    )
    inference_prefix_caching: bool = Field(default=True)
    inference_extra_args: str = Field(default="", description="more vLLM flags, shell-split")
    inference_start_timeout_s: float = Field(default=600.0, gt=0)

    @property
    def policy_mode(self) -> Literal["merged", "lora"]:
        """`inference_policy_mode` with `auto` resolved for the device."""
        if self.inference_policy_mode != "auto":
            return self.inference_policy_mode
        return "lora" if self.inference_device == "cuda" else "merged"
