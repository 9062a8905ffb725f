"""The FastAPI app: routers, auth, body and metrics middleware, error handlers, the console."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from artfleet.runtime.metrics import MetricsEndpoint
from artfleet_api import __version__, errors, routes_jobs, routes_ops, trajectories
from artfleet_api.backends import Backends
from artfleet_api.body_checks import BodyMiddleware
from artfleet_api.middleware import AuthMiddleware, MetricsMiddleware, is_open
from artfleet_api.settings import ApiSettings
from artfleet_api.tinker_api import routes as tinker_api

STATIC = Path(__file__).parent / "static"
DESCRIPTION = (
    "Training jobs, rollouts and evaluation on an ArtFleet fleet (the HTTP training API's "
    "endpoints), and the web console at `/`. Every route but `/health`, this description and "
    "the console's static files needs `Authorization: Bearer <ARTFLEET_API_TOKEN>` "
    "(here: *Authorize*). Under `/api/v1`: the Tinker-compatible API, whose "
    "clients send the token as `X-API-Key: tml-<ARTFLEET_API_TOKEN>`."
)


def create_app(settings: ApiSettings, metrics_port: int | None = None) -> FastAPI:
    """`metrics_port`: also serve /metrics there without a token (Prometheus; None: off)."""
    backends = Backends(settings)
    endpoint = None if metrics_port is None else MetricsEndpoint(settings.host, metrics_port)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await backends.start()  # lazy channels: starts even with the trainer down
        if endpoint is not None:
            endpoint.start()
        try:
            yield
        finally:
            if endpoint is not None:
                endpoint.stop()
            await backends.stop()

    app = FastAPI(
        title="ArtFleet API", version=__version__, description=DESCRIPTION, lifespan=lifespan
    )
    app.state.settings = settings
    app.state.backends = backends
    errors.install(app)
    app.include_router(routes_jobs.router)
    app.include_router(routes_ops.router)
    app.include_router(trajectories.router)
    app.include_router(tinker_api.router)
    _console(app)
    _document_bearer(app)
    # Added last = outermost: metrics count the 401s, 413s and 415s too; a body is
    # checked only once the token is (a stranger's 50 MB is a 401, unread).
    app.add_middleware(BodyMiddleware, settings=settings)
    app.add_middleware(AuthMiddleware, token=settings.api_token.get_secret_value())
    app.add_middleware(MetricsMiddleware)
    return app


UNAUTHORIZED = {
    "description": "missing or wrong bearer token",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
}


def _document_bearer(app: FastAPI) -> None:
    """The token in the schema (the middleware checks it), so /docs can send it."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
            schemes["bearer"] = {"type": "http", "scheme": "bearer"}
            schema["security"] = [{"bearer": []}]
            for path, operations in schema.get("paths", {}).items():
                for operation in operations.values():
                    if is_open(path):
                        operation["security"] = []
                    else:  # every secured route answers the middleware's 401
                        operation.setdefault("responses", {}).setdefault("401", UNAUTHORIZED)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _console(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def console() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/metrics", tags=["ops"], response_class=Response)
    async def metrics(request: Request) -> Response:
        """Prometheus metrics of this process (API request counts and latencies)."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
