"""Settings of the reward service, read from `ARTFLEET_*` variables.

Judge endpoints are chosen per job (the reward spec); their API keys are read from this
service's environment by the variable name the spec gives (`api_key_env`).
"""

from __future__ import annotations

from pydantic import Field

from artfleet.runtime.config import ServerSettings


class RewardSettings(ServerSettings):
    judge_timeout_s: float = Field(
        default=120.0, gt=0, description="Default timeout of one judge call (a CPU judge is slow)"
    )
    judge_concurrency: int = Field(
        default=4, ge=1, le=256, description="Judge calls in flight per group (judge scorer)"
    )
    judge_cache_size: int = Field(
        default=4096, ge=0, description="Judge verdicts cached in memory (0 = no cache)"
    )
    mcp_timeout_s: float = Field(
        default=60.0, gt=0, description="Default timeout to evaluate one trajectory over MCP"
    )
    mcp_concurrency: int = Field(
        default=4, ge=1, le=64, description="MCP sessions (server processes) open at once"
    )
