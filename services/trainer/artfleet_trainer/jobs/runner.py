"""The job runner: up to `max_running_jobs` jobs side by side, each step by step:
rollouts → gather → train → checkpoint. Each job is a tenant of the backend (its own
adapter on the shared base); their training steps take the backend's gate in turn, so
one job's step trains while another's rollouts run."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from functools import partial
from typing import Any

import kombu.exceptions
import redis.exceptions

from artfleet.contracts.art_types import art
from artfleet.contracts.batches import Gathered, StepBatches
from artfleet.contracts.errors import Unavailable
from artfleet.runtime.tasks import cancel_and_wait
from artfleet.specs.job import JobSpecModel, spec_from_proto
from artfleet.v1 import batch_pb2
from artfleet.v1 import common_pb2 as pb
from artfleet_trainer import metrics
from artfleet_trainer.backends import TrainerBackend
from artfleet_trainer.clients.rollouts import Dispatcher, ScenarioSource
from artfleet_trainer.jobs import (
    episode_failures,
    experiment,
    grpo,
    mismatch,
    pipeline,
    retention,
    samples,
    scheduling,
    scoring_health,
    wandb_runs,
)
from artfleet_trainer.jobs.evals import Evaluator
from artfleet_trainer.jobs.policy_gate import PolicyGate, PolicyProbe
from artfleet_trainer.jobs.steps import (
    build_groups,
    check_reward_signals,
    summarize_step,
)
from artfleet_trainer.jobs.store import JobStore, TrainedStep
from artfleet_trainer.settings import TrainerSettings
from artfleet_trainer.sft.phase import SftPhase
from artfleet_trainer.sft.phase import offset as sft_offset

log = logging.getLogger(__name__)


TRAINED_NOTHING = (
    "trained nothing: no step had a sequence to train (every group's rewards were equal), "
    "so its checkpoints are the starting policy; see each step's scorer errors and rewards"
)


class JobCancelled(Exception):
    pass


class Interrupted(Exception):
    """The job met a transient outage; it stays RUNNING and resumes."""


# Outages of what the fleet depends on, not failures of the job.
TRANSIENT: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    kombu.exceptions.OperationalError,
    Unavailable,
)
RETRY: tuple[type[BaseException], ...] = (Interrupted, *TRANSIENT)


class JobRunner:
    """Runs queued jobs, up to `max_running` at once; on start it first resumes the jobs a
    previous trainer left running."""

    def __init__(
        self,
        settings: TrainerSettings,
        store: JobStore,
        backend: TrainerBackend,
        dispatcher: Dispatcher,
        rollout: ScenarioSource,
        batches: StepBatches,
        policy_probe: PolicyProbe | None = None,
        max_running: int = 1,
    ) -> None:
        self._settings = settings
        self._policy_probe = policy_probe
        self._store = store
        self._backend = backend
        self._dispatcher = dispatcher
        self._rollout = rollout
        self._batches = batches
        self._evaluator = Evaluator(store, dispatcher, rollout, batches)
        self._sft = SftPhase(store, backend)
        self._owner = settings.replica_id or f"trainer-{id(self):x}"
        self.max_running = max(1, max_running)
        self._task: asyncio.Task[None] | None = None
        self._running: dict[str, asyncio.Task[None]] = {}  # job id → its task
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="job-runner")

    async def stop(self, grace_s: float) -> None:
        """Interrupts the current steps: the jobs stay RUNNING and resume at those steps."""
        self._stopping.set()
        jobs = dict(self._running)
        tasks = [t for t in (self._task, *jobs.values()) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        # A cancel that lands in a job's own release (its job just ended) cuts it short,
        # and another trainer would wait out the lease; a job still running keeps its.
        for job_id, task in jobs.items():
            if task.done():
                with contextlib.suppress(*TRANSIENT):
                    await self._store.release_lease(job_id, self._owner)

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                if len(self._running) >= self.max_running:
                    self._slot_freed.clear()
                    await self._slot_freed.wait()
                    continue
                if not await self._take_next():
                    await asyncio.sleep(self._settings.poll_interval_s)
            except asyncio.CancelledError:
                raise
            except RETRY as exc:
                log.warning("job runner: %s; trying again", exc)
                await asyncio.sleep(self._settings.poll_interval_s)
            except Exception:  # keep the runner alive for the next job
                log.exception("job runner error")
                await asyncio.sleep(self._settings.poll_interval_s)

    async def _take_next(self) -> bool:
        """Start the first runnable job whose lease this trainer gets; False: none."""
        for job in await self._store.runnable(exclude=self._running):
            if await self._store.acquire_lease(job.id, self._owner, self._settings.job_lease_s):
                task = asyncio.create_task(self._run_to_end(job), name=f"job-{job.id}")
                self._running[job.id] = task
                task.add_done_callback(partial(self._job_ended, job.id))
                return True
        return False

    def _job_ended(self, job_id: str, _task: object) -> None:
        self._running.pop(job_id, None)
        self._slot_freed.set()

    async def _run_to_end(self, job: pb.Job) -> None:
        """One job's task: an outage leaves it RUNNING, to be taken again after a pause."""
        try:
            await self._run_with_lease(job)
        except RETRY as exc:
            log.warning("job %s: %s; trying again", job.id, exc)
            await asyncio.sleep(self._settings.poll_interval_s)
        except Exception:
            log.exception("job %s: runner error", job.id)
            await asyncio.sleep(self._settings.poll_interval_s)

    async def _run_with_lease(self, job: pb.Job) -> None:
        renew = asyncio.create_task(self._renew_lease(job.id))
        try:
            await self._run_job(job)
        finally:
            await cancel_and_wait(renew)
            await self._store.release_lease(job.id, self._owner)

    async def _renew_lease(self, job_id: str) -> None:
        while True:
            await asyncio.sleep(self._settings.job_lease_s / 3)
            await self._store.acquire_lease(job_id, self._owner, self._settings.job_lease_s)

    async def _run_job(self, job: pb.Job) -> None:
        running_now = False
        try:
            spec = spec_from_proto(job.spec)
            if job.state == pb.JOB_STATE_RUNNING:  # a previous trainer left it mid-job
                metrics.JOB_RESUMES.inc()
            experiment.started(job, spec)
            await self._store.set_state(job, pb.JOB_STATE_RUNNING)
            metrics.JOBS_RUNNING.inc()
            running_now = True
            await self._train(job, spec)
            await wandb_runs.finish(job.id)  # before the job says done
            job.trained_nothing = bool(job.steps) and not any(
                s.trained_sequences for s in job.steps
            )
            note = TRAINED_NOTHING if job.trained_nothing else ""
            await self._store.set_state(job, pb.JOB_STATE_SUCCEEDED, note=note)
            metrics.JOBS_FINISHED.labels("succeeded").inc()
        except JobCancelled:
            await self._store.set_state(job, pb.JOB_STATE_CANCELLED)
            metrics.JOBS_FINISHED.labels("cancelled").inc()
        except asyncio.CancelledError:
            log.info(
                "job %s interrupted at step %d; it resumes on restart",
                job.id,
                job.completed_steps + 1,
            )
            raise
        except TRANSIENT as exc:
            # Redis restarting or no rollout replica answering is not the job's fault (the
            # chaos suite restarts Redis mid-step): the job stays RUNNING and the loop takes
            # it up again, resuming at this step once they are back.
            metrics.JOB_INTERRUPTIONS.inc()
            raise Interrupted(f"job {job.id}: {type(exc).__name__}: {exc}") from exc
        except Exception as exc:
            log.exception("job %s failed", job.id)
            await self._store.set_state(
                job, pb.JOB_STATE_FAILED, error=f"{type(exc).__name__}: {exc}"
            )
            metrics.JOBS_FINISHED.labels("failed").inc()
        finally:
            if running_now:
                metrics.JOBS_RUNNING.dec()
            experiment.ended(job.id)
            await wandb_runs.finish(job.id)

    async def _train(self, job: pb.Job, spec: JobSpecModel) -> None:
        model: art.TrainableModel = art.TrainableModel(
            name=f"{spec.name}-{job.id}",
            project=spec.project,
            base_model=spec.base_model,
            config=experiment.model_config(job, spec),
            _internal_config=internal_config(spec),
        )
        await wandb_runs.attach(job, spec, model)
        discarded = await self._rewind_to_record(job, spec, model)
        await self._backend.register_model(model)
        await self._retire(model, discarded)
        set_priority = getattr(self._backend, "set_priority", None)  # the torch backend's
        if set_priority is not None:
            set_priority(model, spec.priority)
        if await self._store.cancel_requested(job.id):
            raise JobCancelled()
        # The offline warm-start: once per job, before step 1; GRPO goes on from its adapter.
        await self._sft.run(job, spec, model)
        # The record is the truth (a later checkpoint was discarded above); the SFT adapter
        # is a checkpoint before step 1 (sft.phase.offset).
        offset = sft_offset(job)
        done = job.completed_steps
        if done:
            await self._batches.close(job.id, done)
        if await self._store.resume_pending(job.id):
            await self._start_afresh(job, spec, done)
        scenario_ids = await self._rollout.scenario_ids(spec.environment, spec.split)
        steps = pipeline.StepPipeline(
            job=job,
            spec=spec,
            model=model,
            scenario_ids=scenario_ids,
            batches=self._batches,
            dispatcher=self._dispatcher,
            inference_url=self._inference_url(model),
            version_offset=offset,
            gate=PolicyGate(self._policy_probe, self._settings.policy_outage_s),
        )
        # Step 0: the base policy's figures; on resume, an eval the restart interrupted.
        await steps.policy_served()
        await self._evaluator.maybe_run(job, spec, model, done, self._inference_url(model))
        for step in range(done + 1, spec.steps + 1):
            if await self._store.cancel_requested(job.id):
                raise JobCancelled()
            n = len(scheduling.dataset(scenario_ids, spec.seed, spec.dataset_size))
            if step > scheduling.steps_with_scenarios(
                n, spec.groups_per_step, step, spec.num_epochs
            ):
                break  # --num-epochs (R2E-Gym training script): the scenario stream has ended
            await self._run_step(job, spec, model, steps, step)
            await self._evaluator.maybe_run(job, spec, model, step, self._inference_url(model))
            await self._retire(
                model, retention.apply(self._settings.art_path, model.name, job, spec)
            )
        if await self._store.cancel_requested(job.id):  # in the last step too: resumable
            raise JobCancelled()

    async def _rewind_to_record(self, job: pb.Job, spec: JobSpecModel, model: Any) -> list[int]:
        """Checkpoints past the job's record were saved by a step whose record never was
        (the trainer stopped between the two: the torch thread finishes a step it was
        interrupted in). They are not taken as done: they are discarded, and the step trains
        again from its stored batch, so every step is on the record exactly once."""
        if spec.sft is not None and not job.sft.done:
            return []  # the SFT phase takes its own checkpoint as done (sft/phase.py)
        recorded = sft_offset(job) + job.completed_steps
        discarded = await self._backend.discard_checkpoints_after(model, recorded)
        if discarded:
            metrics.STEPS_DISCARDED.inc(len(discarded))
            note = (
                f"checkpoint {', '.join(map(str, discarded))} was saved but the step never "
                f"recorded (the trainer stopped in between): training step "
                f"{job.completed_steps + 1} again from its stored batch"
            )
            log.warning("job %s: %s", job.id, note)
            await self._store.emit(job.id, pb.ProgressEvent(kind=pb.EVENT_KIND_LOG, message=note))
        return discarded

    async def _retire(self, model: Any, steps: list[int]) -> None:
        """Deleted checkpoints: the engine stops serving them (torch backend; vLLM)."""
        retire = getattr(self._backend, "retire_checkpoints", None)
        if steps and retire is not None:
            await retire(model, steps)

    async def _start_afresh(self, job: pb.Job, spec: JobSpecModel, done: int) -> None:
        """A resumed job (it had FAILED or was CANCELLED) runs the steps it had begun from
        nothing: what their batches hold may be what failed it (a fail_job verdict)."""
        last = min(done + 1 + spec.max_steps_off_policy, spec.steps)
        for step in range(done + 1, last + 1):
            await self._batches.discard(job.id, step)
        await self._store.resume_handled(job.id)

    async def _run_step(
        self,
        job: pb.Job,
        spec: JobSpecModel,
        model: Any,
        steps: pipeline.StepPipeline,
        step: int,
    ) -> None:
        start, cpu_start = time.monotonic(), time.process_time()
        await self._store.emit(job.id, step_event(step, spec.steps))
        # After a restart the trainer is back long before vLLM: dispatch to a serving policy.
        policy_wait_s = await steps.policy_served()
        # Steps step+1 .. step+k (max_steps_off_policy) roll out while this one trains.
        await steps.dispatch_through(step, version=job.completed_steps + steps.version_offset)
        got = await steps.gather(step)
        gathered = got.gathered
        rollout_s = time.monotonic() - start
        log_gathered(step, gathered)
        check_reward_signals(step, gathered.groups)
        groups = build_groups(gathered.groups)
        if not groups:
            raise RuntimeError(episode_failures.nothing_trained(job.id, step, gathered.groups))
        metrics.GATHER_CPU_SECONDS.inc(time.process_time() - cpu_start)
        metrics.GATHERED_GROUPS.inc(len(gathered.groups))
        result, rollout_idle_s = await self._train_on(spec, model, steps, step, groups)
        summary = summarize_step(step, groups, result, rollout_s, time.monotonic() - start)
        pipeline.record(summary, got, rollout_idle_s)
        summary.policy_wait_seconds = policy_wait_s
        scoring_health.mark(summary, gathered.groups)
        episode_failures.mark(
            job.id,
            summary,
            gathered.groups,
            gathered.expected * spec.rollouts_per_group,
            self._settings.episode_failure_warn_share,
        )
        mismatch_warning = self._mark_mismatch(job, summary, result)
        job.completed_steps = step
        job.policy = model.get_inference_name()
        job.steps.append(summary)
        if await self._store.cancel_requested(job.id):  # keep what CancelJob recorded
            job.state = pb.JOB_STATE_CANCELLING
        # The checkpoint is saved: the ledger entry, the summary and the event in one go.
        await self._store.record_step(
            job, trained_entry(step, gathered, groups), step_event(step, spec.steps, summary)
        )
        metrics.STEPS_TRAINED.inc()
        if mismatch_warning:
            message = f"warning: step {step}: {mismatch_warning}"
            await self._store.emit(
                job.id, pb.ProgressEvent(kind=pb.EVENT_KIND_LOG, step=step, message=message)
            )
        await self._batches.close(job.id, step)  # its checkpoint is saved: the batch is done
        steps.done(step)
        metrics.observe_step(summary)
        try:  # ART's own history and trajectory logs under the ART path
            await model.log(groups, split="train", metrics=dict(result.metrics), step=step)
        except Exception:
            log.warning("ART's model.log failed for step %d", step, exc_info=True)
        await samples.write_step_async(
            self._settings.trajectory_log_dir, job, spec, step, gathered.groups
        )
        # After the step is recorded and its samples written: they show what failed.
        scoring_health.check(job, self._settings.max_scoring_failed_steps)

    def _mark_mismatch(self, job: pb.Job, summary: pb.StepSummary, result: Any) -> str:
        """The step's sampler/trainer mismatch into its summary; its warning, if any."""
        settings = self._settings
        return mismatch.mark(
            job.id,
            summary,
            dict(getattr(result, "metrics", {}) or {}),
            mismatch.sampling_engine(settings.backend, settings.inference_engine),
            outside_share=settings.mismatch_warn_outside_share,
            k3=settings.mismatch_warn_k3,
        )

    async def _train_on(
        self,
        spec: JobSpecModel,
        model: Any,
        steps: pipeline.StepPipeline,
        step: int,
        groups: list[art.TrajectoryGroup],
    ) -> tuple[Any, float]:
        """The step's training (its checkpoint saved); the rollout side's idle seconds."""
        train_start = time.monotonic()
        metrics.TRAINING.inc()
        try:
            result, rollout_idle_s = await steps.while_training(
                step,
                self._backend.train(
                    model, groups, learning_rate=spec.learning_rate, **grpo.train_kwargs(spec)
                ),
            )
        finally:
            metrics.TRAINING.dec()
        metrics.observe_train(
            dict(getattr(result, "metrics", {}) or {}),
            spec.learning_rate,
            time.monotonic() - train_start,
        )
        return result, rollout_idle_s

    def _inference_url(self, model: Any) -> str:
        return self._settings.inference_public_url or str(model.inference_base_url)


def step_event(step: int, total_steps: int, done: pb.StepSummary | None = None) -> pb.ProgressEvent:
    """STEP_STARTED, or STEP_DONE with the step's summary."""
    kind = pb.EVENT_KIND_STEP_STARTED if done is None else pb.EVENT_KIND_STEP_DONE
    event = pb.ProgressEvent(
        kind=kind, step=step, total_steps=total_steps, state=pb.JOB_STATE_RUNNING
    )
    if done is not None:
        event.summary.CopyFrom(done)
    return event


def log_gathered(step: int, gathered: Gathered) -> None:
    counts = ", ".join(
        f"{n} {batch_pb2.GroupState.Name(state).removeprefix('GROUP_STATE_').lower()}"
        for state, n in sorted(gathered.counts.items())
    )
    log.info(
        "step %d: %d/%d groups in %.1fs (%s; %d requeued)",
        step,
        len(gathered.groups),
        gathered.expected,
        gathered.waited_s,
        counts or "none",
        gathered.requeued,
    )


def trained_entry(step: int, gathered: Gathered, groups: list[art.TrajectoryGroup]) -> TrainedStep:
    entries = gathered.groups
    trained = [e.group_id for e in entries if not e.outcome.group_dropped and e.group.trajectories]
    dropped = sum(
        len(e.outcome.dropped) + (len(e.group.trajectories) if e.outcome.group_dropped else 0)
        for e in entries
    )
    return TrainedStep(
        step=step,
        groups=sorted(trained),
        trajectories=sum(len(g.trajectories) for g in groups),
        dropped=dropped,
        failed_groups=sum(1 for e in entries if e.state == batch_pb2.GROUP_STATE_FAILED),
    )


def internal_config(spec: JobSpecModel) -> art.dev.InternalModelConfig:
    """LoRA shape, plus HUD's GPU memory knobs when the spec sets them (art backend), and
    ART's own `init_args.full_finetuning` for a full fine-tune (the torch backend reads it
    to build the model's kind)."""
    config = art.dev.InternalModelConfig(
        peft_args=art.dev.PeftArgs(
            r=spec.lora_rank, lora_alpha=2 * spec.lora_rank, random_state=spec.seed
        )
    )
    init_args = art.dev.InitArgs()
    if spec.max_seq_length is not None:
        init_args["max_seq_length"] = spec.max_seq_length
    if spec.finetune == "full":
        init_args["full_finetuning"] = True
    if init_args:
        config["init_args"] = init_args
    if spec.gpu_memory_utilization is not None:
        config["engine_args"] = art.dev.EngineArgs(
            gpu_memory_utilization=spec.gpu_memory_utilization
        )
    return config
