"""The trainer's client of one inference service replica (artfleet_inference): publish a
saved checkpoint, retire one, list what it serves, check it answers a policy, ask the
context it serves. The messages are the kernel's (`artfleet.contracts.policy_publish`).
The rollout never uses this: it calls the service's OpenAI endpoint like any other.
`artfleet_trainer.serving.replicas` keeps every replica behind one service name on the
same policy with it."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from pydantic import BaseModel

from artfleet.contracts.model_listing import listed_max_model_len
from artfleet.contracts.policy_publish import (
    PUBLISH_PATH,
    RETIRE_PATH,
    MessageRejected,
    PublishPolicy,
    PublishReply,
    RetirePolicy,
    ServedPolicies,
    parse,
)

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)


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

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout_s: float = 0
    ) -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s else self._timeout
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.request(
                    method, f"{self.url}{path}", json=body, headers=self._headers
                ) as reply,
            ):
                raw = await reply.read()
                status, reason = reply.status, reply.reason
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise InferenceUnavailable(f"inference service at {self.url}: {exc!r}") from exc
        try:
            data = json.loads(raw or b"null")
        except ValueError:
            if status < 400:
                why = f"inference service at {self.url}{path}: not JSON"
                raise InferenceUnavailable(why) from None
            data = None  # an error page: its status says enough
        if status >= 400:
            error = data.get("error") if isinstance(data, dict) else None
            said = error.get("message", reason) if isinstance(error, dict) else reason
            kind = InferenceRefused if status < 500 else InferenceUnavailable
            raise kind(f"inference service at {self.url}{path}: {status} {said}")
        return data if isinstance(data, dict) else {}

    async def publish(self, name: str, step: int, checkpoint: Path, base_model: str) -> float:
        """Serve `checkpoint` (an absolute path: the service checks it is under its ART
        path; an adapter of `base_model`, which it must serve) as `name@step`; returns the
        service's seconds to serve it."""
        message = PublishPolicy(
            name=name, step=step, checkpoint=str(checkpoint), base_model=base_model
        )
        return (await self.send(message)).seconds

    async def send(self, message: PublishPolicy) -> PublishReply:
        reply = await self._call("POST", PUBLISH_PATH, message.model_dump())
        return self._parsed(PublishReply, reply)

    async def retire(self, name: str, step: int | None = None) -> None:
        """Best effort: a replica that does not answer serves the step until it restarts,
        and a deleted checkpoint is never found on disk again."""
        message = RetirePolicy(name=name, step=step)
        try:
            await self._call("POST", RETIRE_PATH, message.model_dump(exclude_none=True))
        except (InferenceUnavailable, InferenceRefused) as exc:
            log.warning("retire %s@%s: %s", name, step, exc)

    async def served(self, timeout_s: float = 10.0) -> ServedPolicies:
        """What this replica serves, with its boot id."""
        return self._parsed(ServedPolicies, await self._call("GET", PUBLISH_PATH, None, timeout_s))

    async def answers(self, model: str, timeout_s: float = 120.0) -> bool:
        """Whether a one-token completion on `model` comes back named `model`: the replica
        really serves it (its engine loaded what the name routes to)."""
        body = {"model": model, "prompt": "ok", "max_tokens": 1, "temperature": 0}
        try:
            reply = await self._call("POST", "/v1/completions", body, timeout_s)
        except InferenceRefused:
            return False
        return reply.get("model") == model

    def _parsed(self, model: type[M], data: dict[str, Any]) -> M:
        try:
            return parse(model, data)
        except MessageRejected as exc:
            raise InferenceUnavailable(f"inference service at {self.url}: {exc}") from None

    async def max_model_len(self, timeout_s: float = 10.0) -> int | None:
        """The context the service's vLLM takes (its `max_model_len`, from GET /v1/models);
        None when the listing names none. InferenceUnavailable when it does not answer,
        InferenceRefused when it refuses (a 4xx: the token)."""
        return listed_max_model_len(await self.models(timeout_s))

    async def models(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """GET /v1/models: the base model first, then each policy, with vLLM's context."""
        return await self._call("GET", "/v1/models", None, timeout_s)

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
