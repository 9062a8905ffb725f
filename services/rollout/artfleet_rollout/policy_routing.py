"""Policy calls spread over the inference replicas behind one base URL.

`http://inference:8000/v1` names a service: with `docker compose up --scale inference=N`
(or a Kubernetes headless service) its host resolves to one address per replica, and a
comma list of URLs names replicas outright (`artfleet.clients.replicas.resolve_urls`,
resolved again every `policy_refresh_s`). Each call goes to one replica:

- an episode's turns to the replica that served its first one (the key is the episode's
  id), which holds its prefix in its cache; a new episode to the least loaded replica
  (calls in flight from this worker);
- a replica that does not answer (refused, reset, timed out, 502/503/504) or answers
  404 (it does not serve this `name@step`: it has not got the new policy yet, or it
  restarted) is avoided for a while and the call goes to another replica at once (it
  prefills the episode's history again); the episode goes on there;
- only when no replica answers, in `model_retries` rounds with backoff between them (a
  restarting server's minute), does the call raise `PolicyUnavailable`, which holds the
  group (`artfleet_rollout.group`).

One `PolicyReplicas` per (base URL, key), shared by every group of the worker.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from openai import APIConnectionError, APIStatusError, AsyncOpenAI
from openai.types.chat import ChatCompletion

from artfleet.clients.replicas import ReplicaChoice, Resolved, resolve_urls
from artfleet_rollout import metrics
from artfleet_rollout.ports import PolicyUnavailable

log = logging.getLogger(__name__)
_JSON_HEADERS = {"Content-Type": "application/json"}

# A gateway or a server still starting: the endpoint is down, not refusing the request.
OUTAGE_STATUSES = frozenset({502, 503, 504})
# Answers after which another replica may well succeed: overloaded, a conflict, a server
# error, or 404 (this replica does not serve the model, another may).
_TRY_ELSEWHERE = frozenset({404, 408, 409, 429}) | OUTAGE_STATUSES
_BACKOFF_S = (0.5, 8.0)  # first pause between rounds, longest (the OpenAI client's)
# A replica cut off from the network never refuses: it is passed over after this, not
# after the whole call's timeout (a long generation may rightly take minutes).
_CONNECT_S = 10.0

APIError = APIConnectionError | APIStatusError


def replica_label(url: str) -> str:
    """A replica's name in metrics and logs: its host:port."""
    return urlsplit(url).netloc.rpartition("@")[2] or url


def is_outage(exc: APIError) -> bool:
    """A connection error (timeouts included) or an outage status: the replica is down."""
    return not isinstance(exc, APIStatusError) or exc.status_code in OUTAGE_STATUSES


def try_elsewhere(exc: APIError) -> bool:
    return not isinstance(exc, APIStatusError) or exc.status_code in _TRY_ELSEWHERE


class PolicyReplicas:
    """The replicas of one base URL: their clients, the choice of one per call, failover."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        rounds: int,
        refresh_s: float = 10.0,
        avoid_s: float = 10.0,
        client: AsyncOpenAI | None = None,
    ) -> None:
        """`client`: one fixed endpoint, called as it is (its own retries); else the base
        URL is resolved and each replica gets a client without retries (failover is
        the retry)."""
        self.base_url = base_url
        self._api_key = api_key
        self._rounds = max(1, rounds)
        self._clients: dict[str, AsyncOpenAI] = {}
        self._choice = ReplicaChoice(avoid_s=avoid_s)
        if client is not None:
            url = str(client.base_url)
            self._clients[url] = client
            self._choice.update([url])
            self._resolved: Resolved | None = None
        else:
            self._resolved = Resolved(lambda: resolve_urls(base_url), refresh_s)

    @classmethod
    def fixed(cls, client: AsyncOpenAI) -> PolicyReplicas:
        return cls(str(client.base_url), "", rounds=1, client=client)

    @property
    def choice(self) -> ReplicaChoice:
        return self._choice

    async def replicas(self) -> list[str]:
        if self._resolved is not None:
            self._choice.update(await self._resolved.get() or [self.base_url])
            await self._drop_gone()
        return self._choice.replicas

    async def _drop_gone(self) -> None:
        """Closes the clients of replicas no longer resolved (a pod replaced under a new
        address), once no call of ours is in flight on them."""
        current = set(self._choice.replicas)
        for url in [u for u in self._clients if u not in current]:
            if not self._choice.in_flight(url):
                await self._clients.pop(url).close()

    def client(self, url: str) -> AsyncOpenAI:
        client = self._clients.get(url)
        if client is None:
            client = AsyncOpenAI(base_url=url, api_key=self._api_key, max_retries=0)
            self._clients[url] = client
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)

    async def post(
        self, body: bytes | Mapping[str, Any], *, episode: str, timeout_s: float
    ) -> ChatCompletion:
        """The chat completion from the first replica that answers `body` (JSON already
        encoded, or an object the OpenAI client's `post` encodes; see the module)."""
        failed: _Failed | None = None
        for round_ in range(self._rounds):
            if round_:
                await asyncio.sleep(_pause(round_))
            await self.replicas()
            answer = await self._round(body, episode, timeout_s)
            if isinstance(answer, ChatCompletion):
                return answer
            failed = answer
            if not failed.wait:
                break  # no replica serves this model: waiting changes nothing
        assert failed is not None and failed.error is not None  # no replica: resolution keeps one
        if failed.down:
            raise PolicyUnavailable(self._why(failed.url, failed.error)) from failed.error
        raise failed.error

    async def _round(
        self, body: bytes | Mapping[str, Any], episode: str, timeout_s: float
    ) -> ChatCompletion | _Failed:
        """Each replica once at most, the episode's own first."""
        tried: set[str] = set()
        failed = _Failed()
        while (url := self._choice.pick(episode, exclude=tried)) is not None:
            tried.add(url)
            try:
                with self._in_flight(url):
                    completion: ChatCompletion = await self.client(url).post(
                        "/chat/completions",
                        cast_to=ChatCompletion,
                        **_sent(body),
                        options={"timeout": _timeout(timeout_s), "headers": _JSON_HEADERS},
                    )
            except (APIConnectionError, APIStatusError) as exc:
                if not try_elsewhere(exc):
                    raise
                failed.add(url, exc)
                self._failed(url, exc, more=len(tried) < len(self._choice.replicas))
                continue
            self._choice.recovered(url)
            return completion
        return failed

    @contextmanager
    def _in_flight(self, url: str) -> Any:
        label = replica_label(url)
        metrics.POLICY_REQUESTS.labels(label).inc()
        metrics.POLICY_IN_FLIGHT.labels(label).inc()
        self._choice.begin(url)
        try:
            yield
        finally:
            self._choice.end(url)
            metrics.POLICY_IN_FLIGHT.labels(label).dec()

    def _failed(self, url: str, exc: APIError, *, more: bool) -> None:
        self._choice.failed(url)
        if self._resolved is not None:
            self._resolved.stale()  # the replica set may have changed
        if more:
            metrics.POLICY_FAILOVERS.labels(replica_label(url)).inc()
        log.warning(
            "policy replica %s: %s%s",
            replica_label(url),
            describe_api_error(exc),
            "; trying another" if more else "",
        )

    def _why(self, url: str, error: APIError) -> str:
        said = f"{url}: {describe_api_error(error)}"
        if len(self._choice.replicas) <= 1:
            return said
        return f"{self.base_url}: no replica answered (last {said})"


@dataclass
class _Failed:
    """A round in which no replica answered: the last error, whether a replica was down
    (then the endpoint is out, not refusing), and whether waiting may help (anything but
    every replica answering 404)."""

    url: str = ""
    error: APIError | None = None
    down: bool = False
    wait: bool = False

    def add(self, url: str, exc: APIError) -> None:
        self.url, self.error = url, exc
        self.down = self.down or is_outage(exc)
        self.wait = self.wait or not (isinstance(exc, APIStatusError) and exc.status_code == 404)


def _sent(body: bytes | Mapping[str, Any]) -> dict[str, Any]:
    """How the OpenAI client's `post` takes `body`: encoded JSON as the request's content
    (the caller built it once: ports.EncodedList), else an object it encodes."""
    return {"content": body} if isinstance(body, bytes) else {"body": body}


def _timeout(timeout_s: float) -> httpx.Timeout:
    return httpx.Timeout(timeout_s, connect=min(timeout_s, _CONNECT_S))


def _pause(round_: int) -> float:
    first, longest = _BACKOFF_S
    return min(first * 2 ** (round_ - 1), longest) * random.uniform(0.75, 1.0)


def describe_api_error(exc: APIError) -> str:
    if isinstance(exc, APIStatusError):
        return f"HTTP {exc.status_code}: {_status_message(exc)}"
    return f"{type(exc).__name__}: {exc.__cause__ or exc}"


def _status_message(exc: APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    message = body.get("message") or (body.get("error") or {}).get("message")
    return str(message or exc.message)
