"""Every inference replica behind one service name, kept on the same policy.

`ARTFLEET_INFERENCE_URL` names the service (`http://inference:8000`): its host resolves
to one address per replica (`docker compose up --scale inference=N`, a Kubernetes
headless service), or it is a comma-separated list of URLs. Rules:

- A publish goes to every replica in service, and counts done when each one *answers*
  the new `name@step` (a one-token completion comes back under that name). A replica
  that fails either is quarantined (`artfleet_trainer_inference_replica_quarantines_total`,
  a warning naming it and why); the publish is done when at least one replica serves.
  A refusal (4xx: a base model the service does not serve) is raised: no replica will
  ever serve that policy.
- A watch loop (every `probe_s`) resolves the name again and asks each replica what it
  serves (`GET /artfleet/v1/policies`). A replica that does not answer is quarantined
  (one that never answered yet, still starting, is only waited for);
  one that answers but is quarantined, new (scaled up), restarted (it lists
  nothing) or behind on a policy gets every current policy published again and verified, and is
  back in service. Older checkpoints need nothing: a replica finds them on the shared
  volume by name when asked.
- A full fine-tune's checkpoint takes the replicas' weights (one full fine-tune an
  inference service): the policies published before it are no longer current.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from artfleet.clients.replicas import resolve_urls, split_urls
from artfleet.contracts.checkpoint_layout import is_full_checkpoint
from artfleet.contracts.policy_publish import PublishPolicy
from artfleet.runtime.tasks import cancel_and_wait
from artfleet_trainer.clients.inference_client import (
    InferenceClient,
    InferenceRefused,
    InferenceUnavailable,
)
from artfleet_trainer.metrics import (
    INFERENCE_REPLICAS,
    POLICY_PUBLISH_SECONDS,
    REPLICA_QUARANTINES,
)

log = logging.getLogger(__name__)

SERVING, QUARANTINED = "serving", "quarantined"


@dataclass(eq=False)
class Replica:
    client: InferenceClient
    state: str = SERVING
    reason: str = ""
    answered: bool = False  # it has answered once (one still starting is not "quarantined")
    published: dict[str, int] = field(default_factory=dict)  # what it answered, by name
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one change at a time


Resolver = Callable[[str], Awaitable[list[str]]]


class InferenceReplicas:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        probe_s: float = 5.0,
        publish_timeout_s: float = 600.0,
        resolve: Resolver = resolve_urls,
    ) -> None:
        if not split_urls(url):
            raise ValueError("no inference URL given")
        self._url = url
        self._token = token
        self.probe_s = probe_s
        self._publish_timeout_s = publish_timeout_s
        self._resolve = resolve
        self._replicas: dict[str, Replica] = {}
        self._current: dict[str, PublishPolicy] = {}  # the latest publish of each policy
        self._watch: asyncio.Task[None] | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        if self._watch is None:
            self._watch = asyncio.create_task(self._watch_forever(), name="inference-replicas")

    async def stop(self) -> None:
        if self._watch is not None:
            await cancel_and_wait(self._watch)
            self._watch = None

    # --- what the trainer asks -------------------------------------------------------------

    async def replicas(self) -> list[Replica]:
        """Every replica the name resolves to now (a name that does not resolve stands
        for itself: resolve_urls keeps it as written)."""
        urls = [url.rstrip("/") for url in await self._resolve(self._url)]
        for url in urls:
            if url not in self._replicas:
                client = InferenceClient(url, self._token, timeout_s=self._publish_timeout_s)
                self._replicas[url] = Replica(client)
        for url in set(self._replicas) - set(urls):
            del self._replicas[url]
        self._count()
        return [self._replicas[url] for url in urls]

    def serving(self) -> list[Replica]:
        return [r for r in self._replicas.values() if r.state == SERVING]

    async def publish(self, message: PublishPolicy) -> int:
        """Publish to every replica in service and verify each; returns how many serve it.
        InferenceUnavailable when none does; InferenceRefused on a refusal."""
        if is_full_checkpoint(Path(message.checkpoint)):
            # A full fine-tune's weights become the replicas' own: no other policy is
            # served beside it (one a service), so none is kept for the watch loop to
            # publish again (the replicas would refuse it and be quarantined).
            self._current = {}
        self._current[message.name] = message
        started = time.monotonic()
        known = await self.replicas()
        # None in service (all starting, or all out): the publish itself is their check.
        replicas = [r for r in known if r.state == SERVING] or known
        results = await asyncio.gather(
            *(self._publish_to(r, [message]) for r in replicas), return_exceptions=True
        )
        for result in results:  # a refusal, or a fault of ours: never counted as "not served"
            if isinstance(result, BaseException):
                raise result
        served = sum(1 for result in results if result is True)
        for replica, result in zip(replicas, results, strict=True):
            if result is True and replica.state == QUARANTINED:
                replica.state, replica.reason = SERVING, ""
        self._count()
        if served == 0:
            why = "; ".join(f"{r.client.url}: {r.reason or 'out'}" for r in known)
            raise InferenceUnavailable(
                f"no inference replica serves {message.name}@{message.step} ({why})"
            )
        POLICY_PUBLISH_SECONDS.observe(time.monotonic() - started)
        return served

    async def retire(self, name: str, step: int | None) -> None:
        await asyncio.gather(*(r.client.retire(name, step) for r in self.serving()))

    async def sampling_url(self) -> str:
        """The root URL of a replica in service (the first one, else the first known)."""
        replicas = await self.replicas()
        serving = [r for r in replicas if r.state == SERVING] or replicas
        return serving[0].client.url

    # --- per replica -----------------------------------------------------------------------

    async def _publish_to(self, replica: Replica, messages: list[PublishPolicy]) -> bool:
        async with replica.lock:
            return await self._publish_locked(replica, messages)

    async def _publish_locked(self, replica: Replica, messages: list[PublishPolicy]) -> bool:
        """Publish `messages` (the newest of each policy) to one replica and check it
        answers each; False, and the replica quarantined, when it fails."""
        try:
            for given in messages:
                message = self._current.get(given.name, given)
                if replica.published.get(message.name) == message.step:
                    continue  # it has this one already (the watch loop got there first)
                await replica.client.send(message)
                model = f"{message.name}@{message.step}"
                if not await replica.client.answers(model):
                    raise InferenceUnavailable(f"it does not answer {model} after a publish")
                replica.published[message.name] = message.step
                replica.answered = True
        except InferenceUnavailable as exc:
            self._quarantine(replica, str(exc))
            return False
        return True

    def _quarantine(self, replica: Replica, reason: str) -> None:
        if replica.state != QUARANTINED and replica.answered:
            REPLICA_QUARANTINES.labels(replica.client.url).inc()
            log.warning("inference replica %s quarantined: %s", replica.client.url, reason)
        elif replica.state != QUARANTINED:
            log.info("inference replica %s not answering yet: %s", replica.client.url, reason)
        replica.state = QUARANTINED
        replica.reason = reason
        self._count()

    def _count(self) -> None:
        states = [r.state for r in self._replicas.values()]
        for state in (SERVING, QUARANTINED):
            INFERENCE_REPLICAS.labels(state).set(states.count(state))

    # --- the watch loop --------------------------------------------------------------------

    async def _watch_forever(self) -> None:
        while True:
            try:
                await self.check_all()
            except Exception:  # the loop must outlive any one bad answer
                log.exception("watching inference replicas")
            await asyncio.sleep(self.probe_s)

    async def check_all(self) -> None:
        """One round of the watch loop over every replica."""
        replicas = await self.replicas()
        await asyncio.gather(*(self._check(r) for r in replicas))

    async def _check(self, replica: Replica) -> None:
        async with replica.lock:  # what it lists is then not overtaken by a publish
            try:
                served = await replica.client.served(timeout_s=min(10.0, self.probe_s * 2))
            except (InferenceUnavailable, InferenceRefused) as exc:
                self._quarantine(replica, str(exc))
                return
            replica.answered = True
            # Its own word: a restarted replica lists nothing, one scaled up is new.
            replica.published = {p.name: p.step for p in served.policies}
            behind = [m for m in self._current.values() if replica.published.get(m.name) != m.step]
            if replica.state == SERVING and not behind:
                return
            try:
                if not await self._publish_locked(replica, behind):
                    return
            except InferenceRefused as exc:  # it will not serve the current policy
                self._quarantine(replica, str(exc))
                return
        if replica.state == QUARANTINED:
            names = ", ".join(f"{m.name}@{m.step}" for m in self._current.values())
            log.info(
                "inference replica %s back in service with %s", replica.client.url, names or "-"
            )
        replica.state, replica.reason = SERVING, ""
        self._count()
