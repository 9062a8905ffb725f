"""API settings (`ARTFLEET_*`), parsed before FastAPI or gRPC stubs are imported."""

from __future__ import annotations

from pydantic import Field

from artfleet.runtime.config import CommonSettings, NameMap

MIB = 1024 * 1024


class ApiSettings(CommonSettings):
    host: str = Field(default="127.0.0.1")
    port: int = Field(default=8000, ge=0, le=65535, description="HTTP port (API and console)")
    metrics_port: int = Field(
        default=0, ge=0, le=65535, description="/metrics without a token (Prometheus); 0: free"
    )
    trainer_target: str = Field(default="127.0.0.1:50051", description="Trainer gRPC address")
    rollout_target: str = Field(default="127.0.0.1:50052", description="Rollout gRPC address")
    reward_target: str = Field(default="127.0.0.1:50054", description="Reward gRPC address")
    sandbox_target: str = Field(default="127.0.0.1:50053", description="Sandbox gRPC address")
    rpc_timeout_s: float = Field(default=30.0, gt=0, description="deadline of unary RPCs")
    rollout_timeout_s: float = Field(default=900.0, gt=0, description="deadline of /rollout")
    health_timeout_s: float = Field(default=2.0, gt=0)
    # Clients of the Tinker-compatible API poll a future again at once and
    # give up on a poll after 45 s: each poll waits on the trainer well inside that.
    # Every route's body is bounded (413 past it: body_checks.py); the routes that carry
    # training data or trajectories (body_checks.DATA_ROUTES) have a larger bound of their
    # own, under what the trainer's gRPC takes in one message (64 MiB of protobuf).
    max_body_bytes: int = Field(
        default=4 * MIB, ge=1024, description="largest request body of a route (413 above)"
    )
    max_data_body_bytes: int = Field(
        default=64 * MIB,
        ge=1024,
        description="largest body of forward_backward, forward and /evaluate (413 above)",
    )
    tinker_api_wait_s: float = Field(
        default=20.0, ge=0, le=35, description="how long retrieve_future waits for a result"
    )
    trajectories_dir: str = Field(
        default="logs", description="sampled trajectories: <dir>/<experiment>/step_<n>/*.json"
    )
    policy_base_url: str = Field(
        default="http://127.0.0.1:8000/v1",
        description="the fleet's policy endpoint (OpenAI-compatible); /health asks it",
    )
    judge_base_url: str = Field(
        default="https://api.openai.com/v1", description="where named judge models are served"
    )
    judge_api_key_env: str = Field(
        default="OPENAI_API_KEY", description="variable, in the reward service, with its key"
    )
    # The HTTP training API names hosted judges (gpt-4o); a fleet maps them onto what it
    # has. Base models are mapped by the trainer (its ARTFLEET_BASE_MODEL_MAP): its files.
    judge_model_map: NameMap = Field(
        default_factory=dict, description='judge names -> served names; "policy" = own policy'
    )
    environment: str = Field(default="shell-tasks", description="environment of seed bodies")
