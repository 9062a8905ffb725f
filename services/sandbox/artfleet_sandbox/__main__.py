"""`artfleet-sandbox`: settings first, then the backend and the Sandbox gRPC service."""

from __future__ import annotations

import sys

from artfleet.runtime.health import HealthMonitor
from artfleet.runtime.rpc.server import GrpcServer, GrpcServiceApp
from artfleet.runtime.service import service_main
from artfleet.v1 import sandbox_pb2_grpc
from artfleet_sandbox.backend import SandboxError
from artfleet_sandbox.settings import SandboxSettings


class SandboxApp(GrpcServiceApp):
    def __init__(self, settings: SandboxSettings) -> None:
        from artfleet_sandbox.factory import build_servicer
        from artfleet_sandbox.pyruntime import default_cache_dir

        servicer, self.backend = build_servicer(settings)
        self.leases = servicer.leases
        self.server = GrpcServer(
            settings,
            "sandbox",
            [lambda server: sandbox_pb2_grpc.add_SandboxServicer_to_server(servicer, server)],
            ["artfleet.v1.Sandbox"],
        )
        # The cache (test runtime, repos) is kept on purpose; session dirs are watched once
        # the backend made its own root (local backend; Docker sessions live in containers).
        self.health = HealthMonitor.for_service(
            "sandbox", settings, store_dirs=[settings.cache_dir or default_cache_dir()]
        )

    async def start_parts(self) -> None:
        from artfleet_sandbox.local_backend import LocalBackend

        await self.backend.start()
        if isinstance(self.backend, LocalBackend):
            self.health.watch(self.backend.root)
        await self.leases.start()

    async def stop_parts(self) -> None:
        # Calls have stopped: now remove every session this replica owns.
        await self.leases.stop()
        await self.backend.stop()


def main() -> None:
    try:
        service_main(SandboxSettings, "sandbox", SandboxApp)
    except SandboxError as exc:  # a refused start (no isolation, ...): the reason, no traceback
        print(f"sandbox: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
