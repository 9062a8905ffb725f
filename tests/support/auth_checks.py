"""Checks that an API refuses callers without the fleet token, for every method and route.

Enumerate, do not list: gRPC methods come from the server's own reflection and HTTP routes
from the application's router, so a method or route added later is checked without edits.

Hook for HTTP services: `http_refusals(base_url, routes, token)` with `routes` from
`aiohttp_routes(app)` (or any list of (method, path)) returns what did not refuse.

`header_cases(token)` are the Authorization values every surface must read alike
(artfleet.runtime.auth): the unit tests of the check and the test over every surface run them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import aiohttp
import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

# The policy: health (probes, load balancers) and reflection (grpcurl) answer anyone;
# they carry no secrets. Everything else needs `authorization: Bearer <token>`.
OPEN_GRPC_SERVICES = frozenset(
    {"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}
)
TOKEN = "fleet-auth-cases-token"


@dataclass(frozen=True)
class HeaderCase:
    label: str
    header: str | None  # the Authorization value; None: no such header
    accepted: bool


def header_cases(token: str = TOKEN) -> list[HeaderCase]:
    """The scheme in any case and spaces around it are fine (RFC 7235/6750); anything but
    exactly the token after it is not."""
    return [
        HeaderCase("missing", None, False),
        HeaderCase("other scheme", f"Basic {token}", False),
        HeaderCase("no scheme", token, False),
        HeaderCase("bearer lower case", f"bearer {token}", True),
        HeaderCase("BEARER upper case", f"BEARER {token}", True),
        HeaderCase("extra spaces", f"  Bearer   {token}  ", True),
        HeaderCase("wrong token", "Bearer not-the-token", False),
        HeaderCase("right token", f"Bearer {token}", True),
        HeaderCase("longer token", f"Bearer {token}0", False),
        HeaderCase("shorter token", f"Bearer {token[:-1]}", False),
        HeaderCase("empty token", "Bearer ", False),
    ]


HEADER_CASES = header_cases()


def refused_headers(token: str) -> dict[str, dict[str, str]]:
    """Every refused case as request headers, by label."""
    return {
        case.label: {} if case.header is None else {"Authorization": case.header}
        for case in header_cases(token)
        if not case.accepted
    }


def served_methods(target: str) -> dict[str, list[str]]:
    """Every service the server at `target` reflects, with its method paths."""
    with grpc.insecure_channel(target) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        pool = DescriptorPool(database)
        return {
            name: [f"/{name}/{m.name}" for m in pool.FindServiceByName(name).methods]
            for name in database.get_services()
        }


def grpc_refusals(target: str, paths: Iterable[str], token: str) -> list[str]:
    """(path, credential) pairs not answered UNAUTHENTICATED, plus any that the right token
    also gets UNAUTHENTICATED for (the check must be able to tell the two apart)."""
    problems = []
    with grpc.insecure_channel(target) as channel:
        for path in paths:
            call = channel.unary_unary(path)  # raw bytes: an empty message of any type
            for label, headers in refused_headers(token).items():
                code = _code(call, [(k.lower(), v) for k, v in headers.items()])
                if code != grpc.StatusCode.UNAUTHENTICATED:
                    problems.append(f"{path} with {label} token: {code.name}")
            good = (("authorization", f"Bearer {token}"),)
            if _code(call, good) == grpc.StatusCode.UNAUTHENTICATED:
                problems.append(f"{path} refuses the right token")
    return problems


def _code(
    call: grpc.UnaryUnaryMultiCallable, metadata: Sequence[tuple[str, str]]
) -> grpc.StatusCode:
    try:
        call(b"", metadata=metadata, timeout=10)
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        return code
    return grpc.StatusCode.OK


def aiohttp_routes(app: object) -> list[tuple[str, str]]:
    """(method, concrete path) of every route of an aiohttp application; `{var}` parts get a
    sample value and a `*` route is tried with the common methods."""
    routes = []
    for route in app.router.routes():  # type: ignore[attr-defined]
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter") or ""
        path = re.sub(r"\{[^}]+\}", "x", path)
        methods = ["GET", "POST", "PUT", "DELETE"] if route.method == "*" else [route.method]
        routes += [(method, path) for method in methods if method != "HEAD"]
    return routes


async def http_refusals(base_url: str, routes: Iterable[tuple[str, str]], token: str) -> list[str]:
    """Routes that do not answer 401 to any refused header case (missing, wrong token,
    another scheme, ...)."""
    problems = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for method, path in routes:
            for label, headers in refused_headers(token).items():
                async with session.request(
                    method, base_url + path, headers=headers, json={}
                ) as reply:
                    if reply.status != 401:
                        problems.append(f"{method} {path} with {label} token: HTTP {reply.status}")
    return problems
