"""The policy endpoint as a dependency of a step: nothing is dispatched until it serves the
job's policy, a gather is not cut short by the time it was down, and the job fails only
after an outage longer than its budget (`ARTFLEET_POLICY_OUTAGE_S`), with that reason.

After a restart the trainer is back in seconds while vLLM takes a minute or more to serve
again: dispatching at once made every episode fail on the policy. The rollout workers hold
a group that meets an outage mid-step (artfleet_rollout.group), so the trainer only waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

from artfleet.contracts.errors import Unavailable
from artfleet.runtime.outage import OutageClock, wait_until_back
from artfleet_trainer import metrics

log = logging.getLogger(__name__)
T = TypeVar("T")
SETTING = "ARTFLEET_POLICY_OUTAGE_S"


class PolicyProbe(Protocol):
    """Whether an endpoint serves a policy now, as the rollout workers reach it: None when
    it does, else why not (RolloutClient asks a rollout replica's CheckPolicy)."""

    async def check_policy(self, base_url: str, policy: str) -> str | None: ...


class PolicyGate:
    """One job's view of its policy endpoint. Without a probe (a test's in-process
    rollouts) the endpoint counts as serving."""

    def __init__(
        self, probe: PolicyProbe | None, budget_s: float, watch_every_s: float = 10.0
    ) -> None:
        self._probe = probe
        self._budget_s = budget_s
        self._watch_every_s = watch_every_s
        self._down_s = 0.0  # outages that ended
        self._down_since: float | None = None  # the outage going on, if one is

    @property
    def down_s(self) -> float:
        """Seconds the endpoint was seen down in total, an outage going on included (a
        gather's deadline that falls inside an outage is extended by it)."""
        ongoing = 0.0 if self._down_since is None else time.monotonic() - self._down_since
        return self._down_s + ongoing

    async def wait_serving(self, base_url: str, policy: str) -> float:
        """Seconds waited for `policy` to be served (0.0 at once); OutageTooLong past the
        budget."""
        if self._probe is None:
            return 0.0
        probe = self._probe
        why = await probe.check_policy(base_url, policy)
        if why is None:
            return 0.0
        start = self._down_since = time.monotonic()
        log.warning("the policy endpoint does not serve %s (%s): waiting for it", policy, why)
        try:
            await wait_until_back(
                lambda: probe.check_policy(base_url, policy),
                OutageClock(self._budget_s),
                why,
                what=f"the policy endpoint {base_url} ({policy})",
                setting=SETTING,
            )
        finally:
            waited = time.monotonic() - start
            self._down_s += waited
            self._down_since = None
        metrics.POLICY_WAIT_SECONDS.inc(waited)
        log.info("the policy endpoint serves %s again after %.1fs", policy, waited)
        return waited

    async def watched(self, base_url: str, policy: str, work: Awaitable[T]) -> T:
        """`work` while the endpoint is probed every few seconds (its down time counts in
        `down_s`); an outage past the budget cancels `work` and raises OutageTooLong."""
        if self._probe is None:
            return await work
        task = asyncio.ensure_future(work)
        watcher = asyncio.create_task(self._watch(base_url, policy))
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                watcher.result()  # raises the watcher's OutageTooLong
            return task.result()
        finally:
            for running in (task, watcher):
                running.cancel()
            await asyncio.gather(task, watcher, return_exceptions=True)

    async def _watch(self, base_url: str, policy: str) -> None:
        while True:
            await asyncio.sleep(self._watch_every_s)
            try:
                await self.wait_serving(base_url, policy)
            except Unavailable as exc:  # no rollout replica to ask: cannot tell
                log.debug("policy watch: %s", exc)
