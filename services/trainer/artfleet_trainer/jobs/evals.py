"""Evaluation inside a training job: before step 1 and every `eval_every_steps` steps, k
samples per task of `eval_split` at `eval_temperature` (default: the job's), through the
same rollout machinery as training (one group task per task, published through a step
batch of its own).

The eval's groups live under the job id `<job>-eval` and the policy's step, so they never
mix with a training step's batch; they are never trained on. Every evaluation's groups
are seeded alike (`seeds.EVAL_STEP`): where the policy answers the same, so do the
samples. Results: `Job.evals`, an EVAL progress event, Prometheus gauges, and ART's
`model.log(split="val")` (its history and trajectory logs, beside the training split's).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from artfleet.contracts import evaluation, seeds
from artfleet.contracts.batches import StepBatches
from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import JobSpecModel
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2
from artfleet_trainer import metrics
from artfleet_trainer.clients.rollouts import Dispatcher, ScenarioSource
from artfleet_trainer.jobs import scheduling
from artfleet_trainer.jobs.steps import build_groups
from artfleet_trainer.jobs.store import JobStore

log = logging.getLogger(__name__)


def due(spec: JobSpecModel, job: pb.Job, step: int) -> bool:
    """Evaluate the policy at `step` (0 = before training)? Once per step, also on resume."""
    if spec.eval_every_steps <= 0 or any(e.step == step for e in job.evals):
        return False
    return step == 0 or step % spec.eval_every_steps == 0 or step == spec.steps


async def check_eval_split(rollout: ScenarioSource, spec: JobSpecModel) -> None:
    """At submit: a job that evaluates needs its eval split to exist (named `eval_split`)."""
    if spec.eval_every_steps <= 0:
        return
    try:
        await rollout.scenario_ids(spec.environment, spec.eval_split)
    except InvalidArgument as exc:
        if exc.field != "split":
            raise
        raise InvalidArgument(str(exc).removeprefix("split: "), "eval_split") from None


class Evaluator:
    def __init__(
        self,
        store: JobStore,
        dispatcher: Dispatcher,
        rollout: ScenarioSource,
        batches: StepBatches,
    ) -> None:
        self._store = store
        self._dispatcher = dispatcher
        self._rollout = rollout
        self._batches = batches

    async def maybe_run(
        self, job: pb.Job, spec: JobSpecModel, model: Any, step: int, inference_url: str
    ) -> pb.EvalSummary | None:
        if not due(spec, job, step):
            return None
        summary = await self.run(job, spec, model, step, inference_url)
        job.evals.append(summary)
        await self._store.save(job)
        await self._store.emit(
            job.id,
            pb.ProgressEvent(
                kind=pb.EVENT_KIND_EVAL,
                step=step,
                total_steps=spec.steps,
                state=pb.JOB_STATE_RUNNING,
                eval=summary,
            ),
        )
        metrics.observe_eval(spec.experiment, summary)
        log.info(
            "job %s eval @ step %d: pass@%d %.3f, success %.3f, reward %.3f (%d tasks)",
            job.id,
            step,
            summary.k,
            summary.pass_at_k,
            summary.success_rate,
            summary.reward_mean,
            summary.tasks,
        )
        return summary

    async def run(
        self, job: pb.Job, spec: JobSpecModel, model: Any, step: int, inference_url: str
    ) -> pb.EvalSummary:
        start = time.monotonic()
        scenarios = await self._rollout.scenario_ids(spec.environment, spec.eval_split)
        if spec.eval_max_tasks:
            scenarios = scenarios[: spec.eval_max_tasks]
        tasks = self._tasks(job, spec, model, step, scenarios, inference_url)
        scenario_of = {t.group_id: t.scenario_id for t in tasks}
        owner = evaluation.eval_job_id(job.id)
        kept = await self._batches.restart(owner, step)
        await self._dispatcher.enqueue(tasks, skip=kept)
        gathered = await self._batches.gather(
            owner,
            step,
            list(scenario_of),
            spec.gather_timeout_s,
            scheduling.quorum(len(tasks), spec.min_group_fraction),
        )
        await self._batches.close(owner, step)
        answered = {g.group_id: g.group for g in gathered.groups if not g.outcome.group_dropped}
        results = [
            evaluation.task_result(scenario, answered.get(gid, pb.TrajectoryGroup()))
            for gid, scenario in scenario_of.items()
        ]
        summary = evaluation.summarize(
            results,
            k=spec.eval_k,
            split=spec.eval_split,
            step=step,
            policy=model.get_inference_name(),
            seconds=time.monotonic() - start,
        )
        await _log_val(model, gathered.groups, summary)
        return summary

    def _tasks(
        self,
        job: pb.Job,
        spec: JobSpecModel,
        model: Any,
        step: int,
        scenarios: list[str],
        inference_url: str,
    ) -> list[rollout_pb2.GroupTask]:
        return scheduling.group_tasks(
            spec,
            owner=evaluation.eval_job_id(job.id),
            step=step,
            scenarios=scenarios,
            rollouts=spec.eval_k,
            policy=model.get_inference_name(),
            base_url=inference_url,
            temperature=spec.eval_temperature,
            seed_step=seeds.EVAL_STEP,  # every evaluation draws the same samples
        )


def val_metrics(summary: pb.EvalSummary) -> dict[str, float]:
    return {
        "reward_mean": summary.reward_mean,
        "success_rate": summary.success_rate,
        f"avg@{summary.k}": summary.avg_at_k,
        f"pass@{summary.k}": summary.pass_at_k,
        "tasks": float(summary.tasks),
    }


async def _log_val(model: Any, entries: Any, summary: pb.EvalSummary) -> None:
    """ART's own history and trajectory logs for the `val` split."""
    try:
        groups = build_groups(entries)
        await model.log(groups, split="val", metrics=val_metrics(summary), step=summary.step)
    except Exception:
        log.warning("ART's model.log(split='val') failed at step %d", summary.step, exc_info=True)
