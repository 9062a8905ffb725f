"""`fleet up`'s own settings (the CLI's, read by no service): how long its start may take
and how often it restarts a process that exits. Given as the services' settings are (this
environment's `ARTFLEET_*` variables, `--env-file`, `--set`, remembered in the workdir)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class FleetSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ARTFLEET_", extra="ignore")

    fleet_start_timeout_s: float = Field(
        default=180.0,
        gt=0,
        description="seconds for every process to be ready (`fleet up --start-timeout`); "
        "vLLM's start takes minutes on a busy machine",
    )
    fleet_max_restarts: int = Field(
        default=3,
        ge=0,
        description="restarts of one process within ARTFLEET_FLEET_RESTART_WINDOW_S; one "
        "more exit stops the fleet",
    )
    fleet_restart_window_s: float = Field(default=600.0, gt=0)


# The deadline of a start given none (`demo`, tests): the setting's default.
START_TIMEOUT_S: float = FleetSettings.model_fields["fleet_start_timeout_s"].default
