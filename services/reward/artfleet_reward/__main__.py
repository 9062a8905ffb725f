"""`artfleet-reward`: settings first, then the Reward gRPC service."""

from __future__ import annotations

from artfleet.runtime.health import HealthMonitor
from artfleet.runtime.logs import setup_logging
from artfleet.runtime.rpc.server import GrpcServer
from artfleet.runtime.service import load_settings, run
from artfleet_reward.settings import RewardSettings


class RewardApp:
    def __init__(self, settings: RewardSettings) -> None:
        from artfleet_reward.servicer import SERVICE_NAME, build_servicer, register

        self.server = GrpcServer(
            settings, "reward", [register(build_servicer(settings))], [SERVICE_NAME]
        )
        # Its children are the MCP evaluate servers it starts (bounded by mcp_concurrency).
        self.health = HealthMonitor.for_service("reward", settings)

    async def start(self) -> None:
        await self.server.start()
        self.health.start()
        await self.server.set_serving(True)

    async def stop(self) -> None:
        await self.health.stop()
        await self.server.stop()


def main() -> None:
    settings = load_settings(RewardSettings)
    setup_logging(settings.log_level, "reward")
    run(RewardApp(settings))


if __name__ == "__main__":
    main()
