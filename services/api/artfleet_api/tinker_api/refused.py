"""Routes of the Tinker-compatible API this server does not implement,
refused by name rather than with a bare 404. Routes a client only calls when
client/config turns them on (it does not) are 501. Routes a user can call are 404:
clients retry any 5xx for minutes before giving up, a 404 fails at once."""

from __future__ import annotations

from fastapi import APIRouter, Request

from artfleet_api.tinker_api.errors import PREFIX, WireError

router = APIRouter()

FLAG_GATED = (
    ("POST", "/auth/token"),
    ("POST", "/retrieve_futures"),
    ("POST", "/cancel_future"),
    ("POST", "/create_custom_loss"),
    ("POST", "/join_sampling_session"),
    ("POST", "/unload_model"),
)
USER_CALLED = (
    ("POST", "/save_weights_external"),
    ("POST", "/copy_weights"),
    ("GET", "/checkpoints"),
    ("GET", "/sessions"),
    ("POST", "/sessions/search"),
    ("GET", "/sessions/{session_id}"),
    ("PUT", "/sessions/{session_id}/project"),
    ("GET", "/sessions/{session_id}/trace_export"),
    ("GET", "/audit"),
    ("GET", "/billing/usage/events"),
    ("GET", "/billing/usage/checkpoints/current"),
    ("GET", "/auth/apikey/me"),
    ("DELETE", "/auth/apikey/me"),
)
# A checkpoint id has a slash (`weights/<name>`): its routes end in one more segment
# (archive, external_weights_urls, publish, ttl), named from the path.
CHECKPOINT_ROUTE = "/training_runs/{training_run_id}/checkpoints/{checkpoint_path:path}"
CHECKPOINT_METHODS = ("GET", "POST", "PUT")


def not_implemented(route: str, status: int = 404) -> WireError:
    return WireError(f"{route} is not implemented by this server", status=status)


def _refuse(route: str, status: int) -> object:
    async def refuse() -> None:
        raise not_implemented(route, status)

    return refuse


async def _refuse_checkpoint_route(request: Request, checkpoint_path: str) -> None:
    action = checkpoint_path.rsplit("/", 1)[-1] if checkpoint_path.count("/") >= 2 else None
    checkpoint = "{id}/checkpoints/{checkpoint_id}"
    if action is None:
        route = f"{request.method} {PREFIX}/training_runs/{checkpoint}"
    else:
        route = f"{request.method} {PREFIX}/training_runs/{checkpoint}/{action}"
    raise not_implemented(route)


for _method, _path in (*FLAG_GATED, *USER_CALLED):
    _status = 501 if (_method, _path) in FLAG_GATED else 404
    router.add_api_route(
        _path,
        _refuse(f"{_method} {PREFIX}{_path}", _status),  # type: ignore[arg-type]
        methods=[_method],
        include_in_schema=False,
        name=f"refused {_method} {_path}",
    )
router.add_api_route(
    CHECKPOINT_ROUTE,
    _refuse_checkpoint_route,
    methods=list(CHECKPOINT_METHODS),
    include_in_schema=False,
)
