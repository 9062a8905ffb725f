"""Settings shared by every service: parsed from `ARTFLEET_*` variables before heavy imports."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from artfleet.runtime.health import HealthSettings

PLACEHOLDER_TOKENS = frozenset({"", "changeme", "change-me", "secret", "token", "placeholder"})


def _name_map(value: Any) -> Any:
    # Compose passes an unset variable on as "" (`${VAR:-}`): that is no map, not bad JSON.
    if not isinstance(value, str):
        return value
    if not value.strip():
        return {}
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg}): a JSON object of names") from None


# A JSON object of names onto names from the environment (`{"gpt-4o": "policy"}`); empty = {}.
NameMap = Annotated[dict[str, str], NoDecode, BeforeValidator(_name_map)]


class CommonSettings(BaseSettings, HealthSettings):
    """What every ArtFleet process needs: who it is, where Redis is, the API token, and
    its health monitor's limits (`ARTFLEET_HEALTH_*`, artfleet.runtime.health)."""

    model_config = SettingsConfigDict(env_prefix="ARTFLEET_", extra="ignore")

    api_token: SecretStr = Field(description="Bearer token every gRPC/HTTP API requires")
    redis_url: str = Field(default="redis://127.0.0.1:6379/0")
    log_level: str = Field(default="INFO")
    replica_id: str = Field(default="", description="Names this replica; defaults to host name")

    @field_validator("api_token")
    @classmethod
    def _refuse_placeholder(cls, value: SecretStr) -> SecretStr:
        if value.get_secret_value().strip().lower() in PLACEHOLDER_TOKENS:
            raise ValueError("ARTFLEET_API_TOKEN is empty or a placeholder: set a real secret")
        return value


class ServerSettings(CommonSettings):
    """A gRPC service: its listen address and its Prometheus endpoint."""

    host: str = Field(default="127.0.0.1")
    port: int = Field(default=0, ge=0, le=65535, description="gRPC port; 0 picks a free one")
    metrics_port: int = Field(default=0, ge=0, le=65535, description="0 picks a free one")
    shutdown_grace_s: float = Field(default=10.0, gt=0)
