"""Every gRPC method and HTTP route refuses a missing or wrong token, and every surface
reads the Authorization header alike.

Methods are enumerated from the running servers' reflection and compared with the services
the proto declares, so a new service, method or route is checked without editing this
file. Only health and reflection are open (see docs/architecture.md, "Hostile input").
The same header cases (tests/support/auth_checks.py) run against each real server.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import httpx
import pytest
from auth_checks import (
    HEADER_CASES,
    OPEN_GRPC_SERVICES,
    TOKEN,
    HeaderCase,
    aiohttp_routes,
    grpc_refusals,
    http_refusals,
    served_methods,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from local_http import serve_app
from pydantic import SecretStr
from service_fleet import FuzzFleet, running_fleet

import artfleet.v1
from artfleet.runtime.config import ServerSettings
from artfleet.runtime.rpc.server import GrpcServer
from artfleet.runtime.service import free_port
from artfleet_api.app import create_app
from artfleet_api.settings import ApiSettings
from artfleet_inference.engine import PolicyEngine
from artfleet_inference.policies import PolicyTable
from artfleet_inference.server import Front
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


# --- one set of header cases, every surface ------------------------------------------

# What a surface answers to one Authorization value (None: no header), as one line.
Call = Callable[[str | None], Awaitable[str]]


@dataclass(frozen=True)
class Surface:
    name: str
    serve: Callable[[Path], AbstractAsyncContextManager[Call]]
    accepted: str  # the answer to the right token (the route's own, past the check)
    refused: str  # to a header without the token
    missing: str = ""  # to no header at all, where the surface tells the two apart

    def expected(self, case: HeaderCase) -> str:
        if case.accepted:
            return self.accepted
        return self.missing if case.header is None and self.missing else self.refused


def _headers(header: str | None) -> dict[str, str]:
    return {} if header is None else {"Authorization": header}


def _answer(status: int, headers: object, body: bytes) -> str:
    """The status, a WWW-Authenticate challenge and the error body's fields, as one line."""
    parts = [str(status)]
    challenge = headers.get("www-authenticate")  # type: ignore[attr-defined]
    if challenge is not None:
        parts.append(f"WWW-Authenticate: {challenge}")
    if status >= 400:
        error = httpx.Response(status, content=body).json()
        if isinstance(error.get("error"), dict):  # OpenAI-style
            error = error["error"]
            parts.append(f"{error['type']}/{error['code']}: {error['message']}")
        else:  # the API's own
            parts.append(f"{error['error']} ({error['field']})")
    return " ".join(parts)


@asynccontextmanager
async def _aiohttp_call(base_url: str, method: str, path: str) -> AsyncIterator[Call]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:

        async def call(header: str | None) -> str:
            async with session.request(method, base_url + path, headers=_headers(header)) as r:
                return _answer(r.status, r.headers, await r.read())

        yield call


@asynccontextmanager
async def _grpc(_: Path) -> AsyncIterator[Call]:
    """The interceptor every gRPC service runs (trainer, rollout, reward, sandbox), in the
    shared server; no service registered, so a call past the check is UNIMPLEMENTED."""
    settings = ServerSettings(api_token=SecretStr(TOKEN), port=0, metrics_port=0)
    server = GrpcServer(settings, "auth-cases", [], [])
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            method = channel.unary_unary("/artfleet.v1.Trainer/GetJob")

            async def call(header: str | None) -> str:
                metadata = () if header is None else (("authorization", header),)
                try:
                    await method(b"", metadata=metadata, timeout=10)
                except grpc.aio.AioRpcError as exc:
                    return f"{exc.code().name}: {exc.details()}"
                return "OK"

            yield call
    finally:
        await server.stop(1)


@asynccontextmanager
async def _api(tmp_path: Path, path: str) -> AsyncIterator[Call]:
    """The HTTP API app, its lifespan run, over httpx's ASGI transport; no fleet behind it."""
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    settings = ApiSettings(
        api_token=SecretStr(TOKEN),
        redis_url=f"redis://{down}/0",
        trainer_target=down,
        rollout_target=down,
        reward_target=down,
        sandbox_target=down,
        trajectories_dir=str(tmp_path / "logs"),
        health_timeout_s=1.0,
        rpc_timeout_s=2.0,
    )
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client,
    ):

        async def call(header: str | None) -> str:
            reply = await client.get(path, headers=_headers(header))
            return _answer(reply.status_code, reply.headers, reply.content)

        yield call


@asynccontextmanager
async def _inference_front(tmp_path: Path) -> AsyncIterator[Call]:
    table = PolicyTable("base", "lora", lambda name, step: None)
    engine = PolicyEngine(table, f"http://127.0.0.1:{free_port()}", "vllm-key", tmp_path, tmp_path)
    runner, url = await serve_app(Front(engine, TOKEN, tmp_path, lambda: True).app)
    try:
        async with _aiohttp_call(url, "GET", "/artfleet/v1/policies") as call:
            yield call
    finally:
        await runner.cleanup()


@asynccontextmanager
async def _torch_server(_: Path) -> AsyncIterator[Call]:
    server = InferenceServer({}, api_key=TOKEN)
    port = await server.start()
    try:
        async with _aiohttp_call(f"http://127.0.0.1:{port}", "GET", "/v1/models") as call:
            yield call
    finally:
        await server.stop()


@asynccontextmanager
async def _proxy(_: Path) -> AsyncIterator[Call]:
    """No upstream set: a call past the check is 503."""
    proxy = InferenceProxy("127.0.0.1", 0, TOKEN)
    await proxy.start()
    try:
        async with _aiohttp_call(f"http://127.0.0.1:{proxy.port}", "GET", "/v1/models") as call:
            yield call
    finally:
        await proxy.stop()


GRPC_HINT = "API token: send 'authorization: Bearer <ARTFLEET_API_TOKEN>'"
API_401 = "401 WWW-Authenticate: Bearer"
SURFACES = [
    Surface(
        "grpc",
        _grpc,
        "UNIMPLEMENTED: Method not found!",
        f"UNAUTHENTICATED: invalid {GRPC_HINT}",
        f"UNAUTHENTICATED: missing {GRPC_HINT}",
    ),
    Surface(
        "api",
        lambda tmp: _api(tmp, "/metrics"),
        "200",
        f"{API_401} wrong bearer token (Authorization)",
        f"{API_401} missing bearer token (Authorization)",
    ),
    Surface(  # the Tinker-compatible API: X-API-Key or the same Authorization header
        "api tinker",
        lambda tmp: _api(tmp, "/api/v1/healthz"),
        "200",
        f"{API_401} wrong API key (X-API-Key)",
        f"{API_401} missing API key (X-API-Key)",
    ),
    Surface(
        "inference front",
        _inference_front,
        "200",
        "401 AuthenticationError/401: bad or missing token",
    ),
    Surface(
        "torch server",
        _torch_server,
        "200",
        "401 invalid_request_error/invalid_api_key: Incorrect API key provided.",
    ),
    Surface(
        "inference proxy",
        _proxy,
        "503 server_error/None: no model is being served yet (no job has started)",
        "401 invalid_request_error/invalid_api_key: bad or missing token",
    ),
]


@pytest.mark.parametrize("surface", SURFACES, ids=lambda surface: surface.name)
async def test_every_surface_reads_the_header_alike(surface: Surface, tmp_path: Path) -> None:
    async with surface.serve(tmp_path) as call:
        answers = {case.label: await call(case.header) for case in HEADER_CASES}
    assert answers == {case.label: surface.expected(case) for case in HEADER_CASES}
