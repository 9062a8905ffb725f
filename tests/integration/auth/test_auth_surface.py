"""Every gRPC method and HTTP route refuses a missing or wrong token.

Methods are enumerated from the running servers' reflection and compared with the services
the proto declares, so a new service, method or route is checked without editing this
file. Only health and reflection are open (see docs/architecture.md, "Hostile input").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from auth_checks import (
    OPEN_GRPC_SERVICES,
    aiohttp_routes,
    grpc_refusals,
    http_refusals,
    served_methods,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from service_fleet import FuzzFleet, running_fleet

import artfleet.v1
from artfleet_trainer.backends.inference_proxy import InferenceProxy
from artfleet_trainer.torch_serving.server import InferenceServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

KEY = "inference-auth-test-key"


def declared_services() -> set[str]:
    """Every service of every proto file of the package (new files included)."""
    names = set()
    for module in pkgutil.iter_modules(artfleet.v1.__path__):
        if module.name.endswith("_pb2"):
            loaded = importlib.import_module(f"artfleet.v1.{module.name}")
            names |= {s.full_name for s in loaded.DESCRIPTOR.services_by_name.values()}
    return names


@pytest.fixture(scope="module")
def fleet(redis_url: str) -> Iterator[FuzzFleet]:
    with running_fleet(redis_url) as started:
        yield started


def test_every_declared_service_is_served_and_refuses_bad_tokens(fleet: FuzzFleet) -> None:
    served: dict[str, list[str]] = {}
    problems: list[str] = []
    for name in fleet.ports:
        reflected = served_methods(fleet.target(name))
        assert set(reflected) >= OPEN_GRPC_SERVICES | {name}
        guarded = {s: paths for s, paths in reflected.items() if s not in OPEN_GRPC_SERVICES}
        served.update(guarded)
        paths = [path for methods in guarded.values() for path in methods]
        problems += grpc_refusals(fleet.target(name), paths, fleet.token)
    assert set(served) == declared_services(), "a declared service is not served (or tested)"
    assert sum(len(paths) for paths in served.values()) >= 15
    assert not problems, "\n".join(problems)


def test_health_and_reflection_are_open_by_policy(fleet: FuzzFleet) -> None:
    # Reflection answered without a token above; health does too, for probes.
    for name in fleet.ports:
        with grpc.insecure_channel(fleet.target(name)) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=name), timeout=10
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.fixture
async def inference() -> AsyncIterator[InferenceServer]:
    server = InferenceServer({}, api_key=KEY)  # no policy loaded: auth comes first anyway
    await server.start()
    yield server
    await server.stop()


async def test_inference_server_routes_refuse_bad_tokens(inference: InferenceServer) -> None:
    routes = aiohttp_routes(inference.make_app())
    assert {("GET", "/v1/models"), ("POST", "/v1/chat/completions")} <= set(routes)
    problems = await http_refusals(f"http://127.0.0.1:{inference.port}", routes, KEY)
    assert not problems, "\n".join(problems)


async def test_trainer_inference_proxy_refuses_bad_tokens() -> None:
    proxy = InferenceProxy("127.0.0.1", 0, KEY)
    await proxy.start()
    try:
        assert proxy._runner is not None
        routes = aiohttp_routes(proxy._runner.app)
        assert routes, "the proxy has routes"
        problems = await http_refusals(f"http://127.0.0.1:{proxy.port}", routes, KEY)
    finally:
        await proxy.stop()
    assert not problems, "\n".join(problems)
