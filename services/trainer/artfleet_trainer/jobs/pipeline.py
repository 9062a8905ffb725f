"""Asynchronous steps (`max_steps_off_policy` = k): which steps are out, and the staleness rule.

Versions: a checkpoint step is a policy version; step s trains the model at version s-1
into version s. With k = 0 a step is dispatched, gathered and trained before the next one
is dispatched (the synchronous job, as before). With k > 0, before step s is gathered the
groups of steps s+1 .. s+k are dispatched too, with the policy served then (version s-1):
they roll out while step s is gathered and trained (Celery's queue is FIFO, so step s's
groups run first).

Staleness of a trajectory trained at step s = (s - 1) - its `initial_policy_version` (the
policy of its first answer; the rollout records it from the served `name@step`). By
construction it is at most k. The rule for a group past k (e.g. a backend that served an
old adapter): it is not trained on; it is forgotten in the step batch, dispatched again
with the policy served now (staleness 0) and counted (`artfleet_trainer_stale_groups_total`,
`StepSummary.stale_groups_rerun`). A re-run group that is still stale is dropped.

Restarts keep the guarantees of the synchronous job: the checkpoint says which steps are
done (none is trained twice), and each step is dispatched once per trainer run, after
`StepBatches.restart`, which keeps the final groups stored before (none is run or counted
twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from artfleet.contracts.batches import Gathered, QuorumNotReached, StepBatches
from artfleet.runtime.tasks import cancel_and_wait
from artfleet.specs.job import JobSpecModel
from artfleet.v1 import batch_pb2, rollout_pb2
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer import metrics
from artfleet_trainer.clients.rollouts import Dispatcher
from artfleet_trainer.jobs import scheduling
from artfleet_trainer.jobs.policy_gate import PolicyGate

log = logging.getLogger(__name__)
T = TypeVar("T")


def group_version(entry: batch_pb2.BatchGroup, fallback: int) -> int:
    """The oldest policy that sampled any of the group's trajectories."""
    versions = [
        t.initial_policy_version if t.HasField("initial_policy_version") else fallback
        for t in entry.group.trajectories
    ]
    return min(versions, default=fallback)


def trainable(entry: batch_pb2.BatchGroup) -> bool:
    """As `steps.build_groups` decides: trajectories the reward service kept."""
    return (
        bool(entry.group.trajectories)
        and not entry.outcome.group_dropped
        and not (entry.outcome.fail_job)
    )


def stale_groups(
    entries: Sequence[batch_pb2.BatchGroup], trained_version: int, k: int, fallback: int
) -> list[str]:
    """Trainable groups sampled more than `k` versions behind `trained_version`."""
    return [
        e.group_id
        for e in entries
        if trainable(e) and trained_version - group_version(e, fallback) > k
    ]


def staleness_of(
    entries: Sequence[batch_pb2.BatchGroup], trained_version: int, fallback: int
) -> list[int]:
    """Per trained trajectory: versions behind the model it trains."""
    out = []
    for entry in entries:
        if not trainable(entry):
            continue
        for t in entry.group.trajectories:
            version = t.initial_policy_version if t.HasField("initial_policy_version") else fallback
            out.append(max(0, trained_version - version))
    return out


@dataclass
class StepGroups:
    """What a step gathered, with its staleness and how long the trainer waited for it."""

    gathered: Gathered
    staleness: list[int] = field(default_factory=list)
    stale_rerun: int = 0
    idle_s: float = 0.0


class StepPipeline:
    """One job's steps in flight: dispatches up to k steps ahead, gathers one step at a
    time under the staleness rule, and measures each side's idle time."""

    def __init__(
        self,
        *,
        job: pb.Job,
        spec: JobSpecModel,
        model: Any,
        scenario_ids: list[str],
        batches: StepBatches,
        dispatcher: Dispatcher,
        inference_url: str,
        version_offset: int = 0,
        gate: PolicyGate | None = None,
    ) -> None:
        # Checkpoints before step 1 (an SFT phase's adapter): step s trains version
        # s - 1 + version_offset into s + version_offset.
        self.version_offset = version_offset
        self._job = job
        self._spec = spec
        self._model = model
        self._scenario_ids = scenario_ids
        self._batches = batches
        self._dispatcher = dispatcher
        self._url = inference_url
        self._gate = gate or PolicyGate(None, 0.0)
        self._dispatched: dict[int, dict[str, rollout_pb2.GroupTask]] = {}

    @property
    def k(self) -> int:
        return self._spec.max_steps_off_policy

    def policy_name(self) -> str:
        """The torch server answers plain `name` with its newest step (and names that step
        in the answer), so an episode goes on across a training step; a pinned `name@step`
        would be refused once the step moved on. vLLM (art backend) serves each adapter
        as `name@step` and keeps older ones loaded: pinned there, as in the sync job."""
        if self.k and self._spec.backend == "torch":
            return str(self._model.name)
        return str(self._model.get_inference_name())

    def _tasks(self, step: int, version: int) -> list[rollout_pb2.GroupTask]:
        spec = self._spec
        picked = scheduling.scenarios_for_step(
            self._scenario_ids,
            spec.seed,
            step,
            spec.groups_per_step,
            dataset_size=spec.dataset_size,
            num_epochs=spec.num_epochs,
        )
        return scheduling.group_tasks(
            spec,
            owner=self._job.id,
            step=step,
            scenarios=picked,
            rollouts=spec.rollouts_per_group,
            policy=self.policy_name(),
            base_url=self._url,
            policy_version=version,
        )

    async def policy_served(self) -> float:
        """Seconds waited for the endpoint to serve the policy the next groups sample."""
        return await self._gate.wait_serving(self._url, self.policy_name())

    async def dispatch_through(self, step: int, version: int) -> None:
        """Dispatch steps `step` .. `step + k` (each once), sampled from `version`."""
        for ahead in range(step, min(step + self.k, self._spec.steps) + 1):
            if ahead in self._dispatched:
                continue
            tasks = self._tasks(ahead, version)
            self._dispatched[ahead] = {t.group_id: t for t in tasks}
            # After a restart the batch keeps final groups; the others run again.
            kept = await self._batches.restart(self._job.id, ahead)
            await self._dispatcher.enqueue(tasks, skip=kept)

    async def gather(self, step: int) -> StepGroups:
        """Step `step`'s answered groups, stale ones run again (see the module's rule)."""
        start = time.monotonic()
        tasks = self._dispatched[step]
        spec = self._spec
        gathered = await self._gather(
            step, list(tasks), scheduling.quorum(len(tasks), spec.min_group_fraction)
        )
        trained = step - 1 + self.version_offset
        fallback = trained - self.k
        stale = stale_groups(gathered.groups, trained, self.k, fallback)
        if stale:
            gathered = await self._rerun(step, gathered, stale)
        return StepGroups(
            gathered,
            staleness_of(gathered.groups, trained, fallback),
            len(stale),
            time.monotonic() - start,
        )

    async def _gather(self, step: int, group_ids: list[str], quorum: int) -> Gathered:
        tasks = self._dispatched[step]

        async def requeue(lost: list[str]) -> None:
            # Their workers died mid-group (leases ran out): run them again elsewhere.
            log.warning("step %d: requeuing %d group(s) of dead workers: %s", step, len(lost), lost)
            sent = await self._dispatcher.enqueue([tasks[g] for g in lost], skip=set())
            metrics.GROUPS_REQUEUED.inc(sent)

        # The time the policy was down does not count against the gather's deadline: the
        # workers held their groups meanwhile and run them again.
        timeout_s = self._spec.gather_timeout_s
        while True:
            down_before = self._gate.down_s
            gathering = self._batches.gather(
                self._job.id, step, group_ids, timeout_s, quorum, on_lost=requeue
            )
            try:
                return await self._gate.watched(self._url, self.policy_name(), gathering)
            except QuorumNotReached:
                timeout_s = self._gate.down_s - down_before
                if timeout_s <= 0:
                    raise
                log.warning("step %d: the policy was down %.0fs: gathering longer", step, timeout_s)

    async def _rerun(self, step: int, gathered: Gathered, stale: list[str]) -> Gathered:
        log.warning(
            "step %d: %d group(s) sampled more than %d version(s) behind: running them again",
            step,
            len(stale),
            self.k,
        )
        metrics.STALE_GROUPS.inc(len(stale))
        await self._batches.forget(self._job.id, step, stale)
        fresh = []
        for group_id in stale:
            task = rollout_pb2.GroupTask()
            task.CopyFrom(self._dispatched[step][group_id])
            task.policy = self.policy_name()
            task.reward.policy.model = task.policy
            task.policy_version = step - 1  # served now: the model step `step` trains
            self._dispatched[step][group_id] = task
            fresh.append(task)
        await self._dispatcher.enqueue(fresh, skip=set())
        quorum = scheduling.quorum(len(stale), self._spec.min_group_fraction)
        again = await self._gather(step, stale, quorum)
        still = set(stale_groups(again.groups, step - 1, self.k, step - 1))
        groups = [g for g in gathered.groups if g.group_id not in set(stale)]
        groups += [g for g in again.groups if g.group_id not in still]
        groups.sort(key=lambda g: g.group_id)
        return Gathered(
            groups,
            gathered.expected,
            gathered.waited_s + again.waited_s,
            Counter(int(g.state) for g in groups),
            gathered.requeued + again.requeued,
        )

    async def while_training(self, step: int, train: Awaitable[T]) -> tuple[T, float]:
        """Await `train`; also return the rollout side's idle seconds meanwhile: from when
        every group dispatched ahead was answered (at once when none was) to the end."""
        ahead = {s: list(tasks) for s, tasks in self._dispatched.items() if s > step}
        start = time.monotonic()
        answered_at: list[float] = []

        async def watch() -> None:
            with contextlib.suppress(QuorumNotReached):
                for s, ids in ahead.items():
                    await self._batches.wait(
                        self._job.id, s, ids, self._spec.gather_timeout_s, len(ids)
                    )
                answered_at.append(time.monotonic())

        watcher = asyncio.create_task(watch()) if ahead else None
        try:
            result = await train
        finally:
            if watcher is not None:
                await cancel_and_wait(watcher)
        end = time.monotonic()
        if not ahead:
            return result, end - start
        return result, end - answered_at[0] if answered_at else 0.0

    def done(self, step: int) -> None:
        """Step `step` is checkpointed and its batch closed."""
        self._dispatched.pop(step, None)


def record(summary: pb.StepSummary, got: StepGroups, rollout_idle_s: float) -> None:
    """Put the step's staleness and idle times in its summary and in the metrics."""
    if got.staleness:
        summary.staleness_mean = sum(got.staleness) / len(got.staleness)
        summary.staleness_max = max(got.staleness)
    summary.stale_groups_rerun = got.stale_rerun
    summary.trainer_idle_seconds = got.idle_s
    summary.rollout_idle_seconds = rollout_idle_s
    for value in got.staleness:
        metrics.POLICY_STALENESS.observe(value)
    metrics.IDLE_SECONDS.labels("trainer").observe(got.idle_s)
    metrics.IDLE_SECONDS.labels("rollout").observe(rollout_idle_s)
