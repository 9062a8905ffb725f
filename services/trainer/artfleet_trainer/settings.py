"""Trainer settings (`ARTFLEET_*`), parsed before anything heavy is imported."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from artfleet.runtime.config import NameMap, ServerSettings
from artfleet_trainer.torch_serving.options import DEFAULT_PREFIX_CACHE_BYTES

# The torch backend's base-model dtype (torch_backend/precision.py resolves it).
DtypeName = Literal["auto", "bf16", "fp32"]


class TrainerSettings(ServerSettings):
    backend: Literal["torch", "art"] = Field(default="torch", description="ART backend")
    art_path: str = Field(default=".art", description="ART's path: checkpoints, state, logs")
    trajectory_log_dir: str = Field(
        default="logs", description="sampled trajectories (log_sample_rate) as JSON go here"
    )
    device: str = Field(default="cpu", description="torch device of the torch backend")
    dtype: DtypeName = Field(
        default="auto",
        description="torch backend: the base model's dtype; auto is bf16 on CUDA, fp32 on "
        "a CPU (the LoRA adapter, its optimizer state, logprobs and the loss stay fp32)",
    )
    # Hub ids (what the HTTP training API's users type) onto folders this machine has.
    base_model_map: NameMap = Field(
        default_factory=dict, description="job base_model names -> model folders (JSON)"
    )
    model_cache_dir: str = Field(default="", description="safetensors cache of base models")
    inference_host: str = Field(default="127.0.0.1")
    inference_port: int = Field(default=0, ge=0, le=65535, description="0 picks a free one")
    inference_public_url: str = Field(
        default="", description="URL rollout workers use (…/v1); default: host and port"
    )
    inference_engine: Literal["vllm", "torch"] = Field(
        default="vllm",
        description="torch backend: who serves the policy: the inference service (vLLM, "
        "every replica at inference_url) or the trainer's own server (torch)",
    )
    inference_url: str = Field(
        default="http://127.0.0.1:8000",
        description="the inference service's root URL, as the trainer reaches it: a name "
        "that resolves to every replica, or comma-separated URLs",
    )
    inference_probe_s: float = Field(
        default=5.0,
        gt=0,
        description="seconds between checks of every inference replica (quarantine, "
        "recovery, a restarted or new replica gets the current policy)",
    )
    prefix_cache_bytes: int = Field(
        default=DEFAULT_PREFIX_CACHE_BYTES,
        ge=0,
        description="torch backend: key/values of earlier turns kept for reuse; 0 disables",
    )
    train_activation_budget_bytes: int | None = Field(
        default=None,
        ge=0,
        description="torch backend: activations a training row (GRPO or SFT) keeps for the "
        "backward pass; larger rows recompute some decoder layers; 0 recomputes every "
        "layer (least memory); unset: 2 GiB on a CPU, from the free memory on CUDA",
    )
    train_memory_fraction: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="torch backend on CUDA: the trainer's share of the GPU's memory, a limit "
        "for its allocator and its activation budget (0: no limit; beside vLLM: 1 - its share)",
    )
    train_num_threads: int | None = Field(
        default=None,
        gt=0,
        description="torch backend on a CPU: threads a training step uses; unset: all cores "
        "when the others are idle at the step's start, else all but one",
    )
    train_world: int = Field(
        default=1,
        ge=1,
        description="torch backend: training ranks in all, over all nodes (one per GPU; "
        "above 1 the trainer runs under torchrun, the base sharded with FSDP2: "
        "docs/training.md#several-gpus-and-nodes)",
    )
    train_nodes: int = Field(default=1, ge=1, description="nodes the ranks span")
    train_node_rank: int = Field(
        default=0, ge=0, description="this node's index; node 0 runs rank 0, the service"
    )
    train_master_addr: str = Field(
        default="127.0.0.1", description="node 0's address, reachable from every node"
    )
    train_master_port: int = Field(
        default=29500, ge=1, le=65535, description="torchrun's store on node 0"
    )
    train_collective_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="a collective of the model work waiting longer than this fails its "
        "step (a rank died); torchrun then restarts the group",
    )
    train_max_restarts: int = Field(
        default=3, ge=0, description="times torchrun restarts the group after a rank fails"
    )
    rollout_target: str = Field(default="127.0.0.1:50052", description="Rollout gRPC address")
    reward_target: str = Field(default="127.0.0.1:50054", description="Reward gRPC address")
    sandbox_target: str = Field(
        default="127.0.0.1:50053",
        description="Sandbox gRPC address: asked at submit whether a job's task images exist",
    )
    poll_interval_s: float = Field(default=0.5, gt=0)
    job_lease_s: float = Field(default=30.0, gt=1)
    policy_outage_s: float = Field(
        default=600.0,
        gt=0,
        le=86_400,
        description="a step waits this long at most for the policy endpoint to serve again "
        "(an inference restart or outage) before the job fails with that reason",
    )
    max_scoring_failed_steps: int = Field(
        default=3,
        ge=0,
        description="steps in a row whose every group a scorer error zeroed or dropped before "
        "the job fails, naming the scorer (0: never)",
    )
    episode_failure_warn_share: float = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        description="a step whose failed episodes are more than this share of its episodes "
        "(groups x rollouts) says so: its summary's failure_warning, shown by jobs watch",
    )
    mismatch_warn_outside_share: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="torch backend: a step whose trained tokens' importance ratio "
        "(trainer/sampler) is outside [0.5, 2.0] for more than this share says so: its "
        "summary's mismatch.warning and a LOG event of the job (0: never)",
    )
    mismatch_warn_k3: float = Field(
        default=0.02,
        ge=0.0,
        description="torch backend: likewise for a step whose KL(sampler || trainer) "
        "estimate (k3, per token) is above this (0: never)",
    )
    tinker_api_max_clients: Annotated[int, Field(ge=0)] | Literal["auto"] = Field(
        default="auto",
        description="training clients of the Tinker-compatible API loaded at once, each a "
        "tenant of its base (its own LoRA and optimizer state); auto: as many as the "
        "device's free memory holds beside one step (torch_backend/tenants.py), at most "
        "64; 0 turns the API off",
    )
    max_running_jobs: int = Field(
        default=0,
        ge=0,
        description="jobs trained side by side, each a tenant of its base (its own adapter, "
        "optimizer and steps; their steps take turns); 0: 2 on a CPU, one per 16 GiB of "
        "the GPU (2 to 8) on CUDA; the art backend runs one",
    )
    tinker_api_max_queued_calls: int = Field(
        default=256, ge=1, description="Tinker-compatible API calls waiting or running at once"
    )
    tinker_api_idle_s: float = Field(
        default=300.0,
        gt=0,
        description="a session silent this long (no heartbeat) has its training clients "
        "released from memory; their saved weights stay",
    )

    @model_validator(mode="after")
    def _ranks_fit(self) -> Self:
        if self.train_world % self.train_nodes:
            raise ValueError(
                f"train_world ({self.train_world}) must be a multiple of train_nodes "
                f"({self.train_nodes}): each node runs as many ranks"
            )
        if self.train_node_rank >= self.train_nodes:
            raise ValueError(
                f"train_node_rank ({self.train_node_rank}) must be below train_nodes "
                f"({self.train_nodes})"
            )
        if self.train_world > 1 and (self.backend != "torch" or self.inference_engine != "vllm"):
            raise ValueError(
                "train_world above 1 needs the torch backend with the inference service "
                "serving its policies (ARTFLEET_BACKEND=torch, ARTFLEET_INFERENCE_ENGINE=vllm)"
            )
        return self
