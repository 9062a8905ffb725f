"""`artfleet-reward`: settings first, then the Reward gRPC service."""

from __future__ import annotations

from artfleet.runtime.health import HealthMonitor
from artfleet.runtime.rpc.server import GrpcServer, GrpcServiceApp
from artfleet.runtime.service import service_main
from artfleet_reward.settings import RewardSettings


class RewardApp(GrpcServiceApp):
    def __init__(self, settings: RewardSettings) -> None:
        from artfleet_reward.servicer import SERVICE_NAME, build_servicer, register

        self.server = GrpcServer(
            settings, "reward", [register(build_servicer(settings))], [SERVICE_NAME]
        )
        # Its children are the MCP evaluate servers it starts (bounded by mcp_concurrency).
        self.health = HealthMonitor.for_service("reward", settings)


def main() -> None:
    service_main(RewardSettings, "reward", RewardApp)


if __name__ == "__main__":
    main()
