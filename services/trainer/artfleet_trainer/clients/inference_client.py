"""The trainer's one client of the inference service (artfleet_inference): publish a
saved checkpoint, retire one, ask whether it serves and the context it serves. The
rollout never uses this: it calls the service's OpenAI endpoint like any other."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import aiohttp

from artfleet.contracts.model_listing import listed_max_model_len

log = logging.getLogger(__name__)


class InferenceUnavailable(RuntimeError):
    """The inference service did not answer (or failed: 5xx)."""


class InferenceRefused(ValueError):
    """The inference service refused a request (4xx): it will not serve this policy."""


class InferenceClient:
    def __init__(self, url: str, token: str, *, public_url: str = "", timeout_s: float = 600):
        """`url`: the service's root (`http://inference:8000`), as the trainer reaches it;
        `public_url`: the OpenAI base URL rollout workers use (default `url` + `/v1`)."""
        self.url = url.rstrip("/")
        self.public_url = (public_url or f"{self.url}/v1").rstrip("/")
        self.token = token
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with (
            aiohttp.ClientSession(timeout=self._timeout) as session,
            session.post(f"{self.url}{path}", json=body, headers=self._headers) as reply,
        ):
            data = await reply.json(content_type=None)
            if reply.status >= 400:
                message = (data or {}).get("error", {}).get("message", reply.reason)
                error = InferenceRefused if reply.status < 500 else InferenceUnavailable
                raise error(f"inference service {path}: {reply.status} {message}")
            return dict(data or {})

    async def publish(self, name: str, step: int, checkpoint: Path, base_model: str) -> float:
        """Serve `checkpoint` (an absolute path: the service checks it is under its ART
        path; an adapter of `base_model`, which it must serve) as `name@step`; returns the
        service's seconds to serve it."""
        body = {"name": name, "step": step, "checkpoint": str(checkpoint), "base_model": base_model}
        try:
            reply = await self._post("/artfleet/v1/policies", body)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise InferenceUnavailable(f"inference service at {self.url}: {exc}") from exc
        return float(reply.get("seconds", 0.0))

    async def retire(self, name: str, step: int | None = None) -> None:
        body: dict[str, Any] = {"name": name} if step is None else {"name": name, "step": step}
        try:
            await self._post("/artfleet/v1/policies/retire", body)
        except (aiohttp.ClientError, TimeoutError, InferenceUnavailable, InferenceRefused) as exc:
            log.warning("retire %s@%s: %s", name, step, exc)

    async def max_model_len(self, timeout_s: float = 10.0) -> int | None:
        """The context the service's vLLM takes (its `max_model_len`, from GET /v1/models);
        None when the listing names none. InferenceUnavailable when it does not answer,
        InferenceRefused when it refuses (a 4xx: the token)."""
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
                session.get(f"{self.url}/v1/models", headers=self._headers) as reply,
            ):
                listed = await reply.json(content_type=None)
                status = reply.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise InferenceUnavailable(f"inference service at {self.url}: {exc}") from exc
        if status >= 400:
            error = InferenceRefused if status < 500 else InferenceUnavailable
            raise error(f"inference service /v1/models: {status}")
        return listed_max_model_len(listed)

    async def healthy(self) -> bool:
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
                session.get(f"{self.url}/health") as reply,
            ):
                return reply.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False

    async def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not await self.healthy():
            if time.monotonic() > deadline:
                raise InferenceUnavailable(f"no inference service at {self.url}")
            await asyncio.sleep(1.0)
