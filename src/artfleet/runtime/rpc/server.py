"""One lifecycle for every gRPC service: health, reflection, auth, metrics, bounded shutdown."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from artfleet.runtime.config import ServerSettings
from artfleet.runtime.metrics import MetricsEndpoint
from artfleet.runtime.rpc.interceptors import AuthInterceptor, ObservabilityInterceptor

if TYPE_CHECKING:
    from artfleet.runtime.health import HealthMonitor

log = logging.getLogger(__name__)

Registrar = Callable[[grpc.aio.Server], None]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # trajectory groups with logprobs get large


class GrpcServer:
    """A grpc.aio server whose health says SERVING only once `set_serving(True)` is called.

    `service_names` are the fully qualified names (e.g. `artfleet.v1.Trainer`) registered
    by `registrars`; health reports each of them and the overall "" service.
    """

    def __init__(
        self,
        settings: ServerSettings,
        component: str,
        registrars: Sequence[Registrar],
        service_names: Sequence[str],
    ) -> None:
        self._settings = settings
        self._component = component
        self._registrars = registrars
        self._service_names = list(service_names)
        self._health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self.metrics = MetricsEndpoint(settings.host, settings.metrics_port)
        self.port = 0

    async def start(self) -> None:
        server = grpc.aio.server(
            interceptors=[
                ObservabilityInterceptor(self._component),
                AuthInterceptor(self._settings.api_token.get_secret_value()),
            ],
            options=[
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                # gRPC shares a port by default: a second service on a taken port would
                # take half its connections instead of failing to start.
                ("grpc.so_reuseport", 0),
            ],
        )
        for register in self._registrars:
            register(server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            [*self._service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server
        )
        await self.set_serving(False)
        self.port = server.add_insecure_port(f"{self._settings.host}:{self._settings.port}")
        if self.port == 0:
            raise RuntimeError(f"cannot bind {self._settings.host}:{self._settings.port}")
        await server.start()
        self._server = server
        self.metrics.start()
        log.info(
            "%s listening on %s:%d (metrics on :%d)",
            self._component,
            self._settings.host,
            self.port,
            self.metrics.port,
        )

    async def set_serving(self, serving: bool) -> None:
        status = SERVING if serving else NOT_SERVING
        for name in ["", *self._service_names]:
            await self._health.set(name, status)

    async def stop(self, grace_s: float | None = None) -> None:
        """Stops taking calls, lets running ones finish for up to `grace_s`, then cancels."""
        if self._server is None:
            return
        await self.set_serving(False)
        await self._server.stop(grace_s if grace_s is not None else self._settings.shutdown_grace_s)
        self._server = None
        self.metrics.stop()

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()


class GrpcServiceApp:
    """A gRPC service process: its parts, its server and its health monitor, started in that
    order (SERVING last) and stopped in reverse (NOT_SERVING first, the parts last).

    A subclass sets `server` and `health` and starts/stops its own parts (backend, workers,
    leases) in `start_parts`/`stop_parts`; they run before the server takes calls and after
    it has stopped taking them."""

    server: GrpcServer
    health: HealthMonitor

    async def start_parts(self) -> None:
        """What the servicer needs before the first call (nothing by default)."""

    async def stop_parts(self) -> None:
        """Stops what `start_parts` started, once no call runs any more."""

    async def start(self) -> None:
        await self.start_parts()
        await self.server.start()
        self.health.start()
        await self.server.set_serving(True)

    async def stop(self) -> None:
        await self.server.set_serving(False)
        await self.health.stop()
        await self.server.stop()
        await self.stop_parts()
