"""Settings of the reward service, read from `ARTFLEET_*` variables."""

from __future__ import annotations

from artfleet.config import ServerSettings


class RewardSettings(ServerSettings):
    """Nothing reward-specific yet: scorers are pure. A judge LLM (RULER) will add its
    endpoint and model here."""
