"""Rollout worker settings (`ARTFLEET_*`)."""

from __future__ import annotations

from pydantic import Field

from artfleet.runtime.config import ServerSettings


class RolloutSettings(ServerSettings):
    sandbox_target: str = Field(
        default="127.0.0.1:50053",
        description="host:port of the sandbox service; a name resolving to several "
        "addresses (compose replicas) spreads sessions over them; or a comma list",
    )
    episode_retries: int = Field(
        default=2, ge=0, le=10, description="restarts of an episode whose sandbox replica died"
    )
    sandbox_lease_s: float = Field(
        default=60.0,
        ge=1,
        le=3600,
        description="lease of this worker's sandbox sessions, renewed every third of it; "
        "a worker dead this long has its sessions closed by the sandbox",
    )
    reward_target: str = Field(default="127.0.0.1:50054", description="Reward gRPC address")
    exec_timeout_s: float = Field(default=20.0, gt=0, description="per agent command")
    check_timeout_s: float = Field(default=30.0, gt=0, description="the scenario's check")
    tests_timeout_s: float = Field(default=300.0, gt=0, description="a repo task's hidden tests")
    observation_chars: int = Field(default=1200, ge=100, description="per observation")
    tool_result_chars: int = Field(
        default=2000,
        ge=100,
        description="per tool result; longer ones are cut and count as an invalid step",
    )
    mcp_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="per MCP request (start, tool call, evaluate): a "
        "hung or dead MCP server fails the episode after this",
    )
    plugin_timeout_s: float = Field(
        default=1800.0,
        gt=0,
        description="an ART rollout function's whole episode: a plugin that never returns "
        "fails its episode after this",
    )
    model_retries: int = Field(
        default=10,
        ge=0,
        le=50,
        description="rounds over every inference replica after the first, with backoff "
        "between them (up to ~1 min in all)",
    )
    model_timeout_s: float = Field(default=600.0, gt=0, description="per model call")
    policy_refresh_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="the policy base URL is resolved to its inference replicas again this "
        "often; a replica that failed a call is avoided this long",
    )
    policy_outage_s: float = Field(
        default=600.0,
        gt=0,
        le=86_400,
        description="a group whose policy endpoint stops answering is held and run again "
        "when it serves again; past this long the group fails with that reason",
    )
    groups_concurrency: int = Field(default=4, ge=1, le=64, description="groups at once")
    group_lease_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="lease of a running group, renewed every third of it; a worker dead "
        "this long has its groups dispatched again by the trainer",
    )
    celery_worker: bool = Field(default=True, description="consume the rollout queue")
