"""The service's HTTP front: what the fleet reaches (vLLM stays on loopback).

- `/v1/chat/completions`, `/v1/completions`: checked (requests.py), routed to the weights
  the name asks for (policies.py), forwarded to vLLM, the answer's `model` renamed back
  to `name@step` (the rollout reads the step that answered from it).
- `/v1/models`: the base model and every published policy, each with vLLM's
  `max_model_len` (what vLLM lists; the trainer refuses jobs whose context exceeds it).
- `POST /artfleet/v1/policies` (`PublishPolicy`): the trainer publishes a saved
  checkpoint (of the base model this service serves); `POST /artfleet/v1/policies/retire`
  (`RetirePolicy`) retires one; `GET /artfleet/v1/policies` (`ServedPolicies`) lists what
  this replica serves. The messages: `artfleet.contracts.policy_publish`.
- `GET /health`: 200 when vLLM answers (no token: probes have none; it tells nothing).

Every other route needs `Authorization: Bearer <ARTFLEET_API_TOKEN>` (middleware).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from prometheus_client import Counter
from pydantic import BaseModel

from artfleet.contracts.checkpoint_layout import (
    ADAPTER_CONFIG,
    MODEL_CONFIG,
    ModelRefError,
    is_checkpoint,
)
from artfleet.contracts.model_listing import listed_max_model_len
from artfleet.contracts.policy_publish import (
    PUBLISH_PATH,
    RETIRE_PATH,
    MessageRejected,
    PublishPolicy,
    PublishReply,
    RetirePolicy,
    RetireReply,
    ServedPolicies,
    ServedPolicy,
    parse,
)
from artfleet.runtime.auth import bearer_matches, openai_error
from artfleet_inference.engine import EngineError, PolicyEngine
from artfleet_inference.policies import PublishRefused, UnknownPolicy
from artfleet_inference.requests import (
    BadRequest,
    check_chat,
    check_completion,
    parse_body,
    parse_object,
)

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
M = TypeVar("M", bound=BaseModel)

REQUESTS = Counter(
    "artfleet_inference_requests", "Requests to the inference front", ["route", "status"]
)
GENERATED_TOKENS = Counter(
    "artfleet_inference_generated_tokens", "Completion tokens answered (non-streamed requests)"
)
_FORWARD_HEADERS = ("content-type", "cache-control")


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    kinds = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError"}
    body = openai_error(message, kinds.get(status, "ServerError"), code=status, param=param)
    return web.json_response(body, status=status)


class Front:
    def __init__(
        self,
        engine: PolicyEngine,
        token: str,
        art_path: Path,
        vllm_alive: Callable[[], bool],
    ) -> None:
        self._engine = engine
        self._token = token
        self._art_path = art_path.resolve()
        self._vllm_alive = vllm_alive
        self._session: aiohttp.ClientSession | None = None
        self._max_model_len: int | None = None  # vLLM's, fixed for its process's life
        self.app = web.Application(middlewares=[self._observe, self._auth])
        self.app.router.add_get("/health", self._health)
        self.app.router.add_get("/v1/models", self._models)
        self.app.router.add_post("/v1/chat/completions", self._chat)
        self.app.router.add_post("/v1/completions", self._completion)
        self.app.router.add_post(PUBLISH_PATH, self._publish)
        self.app.router.add_get(PUBLISH_PATH, self._served)
        self.app.router.add_post(RETIRE_PATH, self._retire)
        self.app.on_startup.append(self._open)
        self.app.on_cleanup.append(self._close)

    async def _open(self, _: web.Application) -> None:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=900), auto_decompress=False
        )

    async def _close(self, _: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    # --- middleware --------------------------------------------------------------------

    @web.middleware
    async def _observe(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        route = request.match_info.route.resource
        name = route.canonical if route is not None else "unmatched"
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            response = _error(exc.status, exc.reason)
        except BadRequest as exc:
            response = _error(400, exc.message, exc.param)
        except ModelRefError as exc:
            response = _error(400, str(exc), "model")
        except UnknownPolicy as exc:
            response = _error(404, exc.message, "model")
        except EngineError as exc:
            log.warning("%s", exc)
            response = _error(502, str(exc))
        REQUESTS.labels(name, str(response.status)).inc()
        return response

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization")
        if request.path != "/health" and not bearer_matches(given, self._token):
            return _error(401, "bad or missing token")
        return await handler(request)

    # --- OpenAI routes -----------------------------------------------------------------

    async def _health(self, _: web.Request) -> web.Response:
        if not self._vllm_alive():
            return web.json_response({"status": "vllm not running"}, status=503)
        return web.json_response({"status": "ok"})

    async def _models(self, _: web.Request) -> web.Response:
        table = self._engine.table
        names = [table.base_name, *(f"{n}@{s}" for n, (s, _) in sorted(table.latest.items()))]
        data: list[dict[str, Any]] = [
            {"id": n, "object": "model", "owned_by": "artfleet"} for n in names
        ]
        # Every policy is the base model, an adapter of it or a fine-tune of it: one context.
        max_model_len = await self._vllm_max_model_len()
        if max_model_len is not None:
            for entry in data:
                entry["max_model_len"] = max_model_len
        return web.json_response({"object": "list", "data": data})

    async def _vllm_max_model_len(self) -> int | None:
        """vLLM's max_model_len as its own /v1/models lists it; None while it does not
        answer (the listing goes on without it)."""
        if self._max_model_len is not None or self._session is None:
            return self._max_model_len
        engine = self._engine
        try:
            async with self._session.get(
                f"{engine.vllm_url}/v1/models",
                headers={**engine.headers, "Accept-Encoding": "identity"},
                timeout=aiohttp.ClientTimeout(total=10),
            ) as reply:
                listed = await reply.json(content_type=None) if reply.status == 200 else {}
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("vLLM's /v1/models: %s", exc)
            return None
        self._max_model_len = listed_max_model_len(listed)
        return self._max_model_len

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = parse_body(await request.read())
        check_chat(body)
        return await self._forward(request, "/v1/chat/completions", body)

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        body = parse_body(await request.read())
        check_completion(body)
        return await self._forward(request, "/v1/completions", body)

    async def _forward(
        self, request: web.Request, path: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        assert self._session is not None
        engine = self._engine
        async with engine.gate.shared():
            route = engine.table.route(body["model"])
            await engine.ensure_adapter(route)
            body["model"] = route.vllm_model
            # vLLM names the model it was asked for; callers see the policy's own name.
            renamed = (
                f'"model":"{route.vllm_model}"'.encode(),
                f'"model":"{route.public}"'.encode(),
            )
            url = f"{engine.vllm_url}{path}"
            async with self._session.post(url, json=body, headers=engine.headers) as upstream:
                if body.get("stream"):
                    return await _relay_stream(request, upstream, renamed)
                raw = (await upstream.read()).replace(*renamed)
                if upstream.status == 200:
                    GENERATED_TOKENS.inc(_completion_tokens(raw))
                return web.Response(
                    body=raw, status=upstream.status, content_type="application/json"
                )

    # --- the trainer's routes ----------------------------------------------------------

    async def _publish(self, request: web.Request) -> web.Response:
        message = _message(PublishPolicy, await request.read())
        if message.base_model is not None and not self._engine.table.is_base(message.base_model):
            raise BadRequest(
                f"this inference service serves {self._engine.table.base_name!r}, "
                f"not {message.base_model!r}",
                "base_model",
            )
        checkpoint = await asyncio.to_thread(self._checkpoint, message.checkpoint)
        try:
            seconds = await self._engine.publish(message.name, message.step, checkpoint)
        except PublishRefused as exc:
            raise BadRequest(str(exc), exc.param) from None
        except ValueError as exc:  # the checkpoint's files (lora_math.AdapterError)
            raise BadRequest(str(exc), "checkpoint") from None
        reply = PublishReply(model=f"{message.name}@{message.step}", seconds=seconds)
        return web.json_response(reply.model_dump())

    def _checkpoint(self, given: str) -> Path:
        """A checkpoint folder the trainer wrote: under the ART path, a LoRA adapter or a
        full fine-tune's whole model."""
        checkpoint = Path(given).resolve()
        if not checkpoint.is_relative_to(self._art_path):
            raise BadRequest("'checkpoint' must be a folder under the ART path", "checkpoint")
        if not is_checkpoint(checkpoint):
            raise BadRequest(
                f"{checkpoint} holds no checkpoint (neither a LoRA adapter's "
                f"{ADAPTER_CONFIG} nor a full fine-tune's {MODEL_CONFIG})",
                "checkpoint",
            )
        return checkpoint

    async def _retire(self, request: web.Request) -> web.Response:
        message = _message(RetirePolicy, await request.read())
        await self._engine.retire(message.name, message.step)
        retired = message.name if message.step is None else f"{message.name}@{message.step}"
        return web.json_response(RetireReply(retired=retired).model_dump())

    async def _served(self, _: web.Request) -> web.Response:
        latest = sorted(self._engine.table.latest.items())
        served = ServedPolicies(
            policies=[ServedPolicy(name=name, step=step) for name, (step, _) in latest],
        )
        return web.json_response(served.model_dump())


def _message(model: type[M], raw: bytes) -> M:
    try:
        return parse(model, parse_object(raw))
    except MessageRejected as exc:
        raise BadRequest(exc.message, exc.field) from None


async def _relay_stream(
    request: web.Request, upstream: aiohttp.ClientResponse, renamed: tuple[bytes, bytes]
) -> web.StreamResponse:
    """Server-sent events, line by line, each chunk's `model` renamed."""
    reply = web.StreamResponse(status=upstream.status)
    for key in _FORWARD_HEADERS:
        if key in upstream.headers:
            reply.headers[key] = upstream.headers[key]
    await reply.prepare(request)
    async for line in upstream.content:
        await reply.write(line.replace(*renamed))
    await reply.write_eof()
    return reply


def _completion_tokens(raw: bytes) -> int:
    try:
        return int(json.loads(raw)["usage"]["completion_tokens"])
    except (ValueError, KeyError, TypeError):
        return 0
