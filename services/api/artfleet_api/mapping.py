"""The HTTP training API's fields onto our job spec, and the trainer's messages onto HTTP bodies."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format

from artfleet.specs.base import default_of
from artfleet.specs.job import JobSpecModel, default_scorers, validate_spec
from artfleet.specs.reward import ScorerModel
from artfleet.specs.scorer_params import POLICY_JUDGE, RULER
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2
from artfleet_api.models import (
    CheckpointOut,
    EvalOut,
    EventOut,
    JobOut,
    OutcomeOut,
    ResumeOut,
    ScorerFailureOut,
    SftOut,
    StepOut,
    TrainRequest,
)
from artfleet_api.settings import ApiSettings

DEFAULT_ROLLOUTS = 4
DEFAULT_EXPERIMENT: str = default_of(JobSpecModel, "experiment")
# Job spec fields as the HTTP training API names them, for error messages about its body.
TRAINING_API_FIELDS = {
    "name": "model_name",
    "steps": "num_steps",
    "groups_per_step": "batch_size",
    "rollouts_per_group": "rollouts_per_group",
    "reward": "judge_model",
}


def judge_param(settings: ApiSettings, judge_model: str) -> str | dict[str, str]:
    """A judge model name as a scorer's `judge`: "policy", or an endpoint of the API's."""
    served = settings.judge_model_map.get(judge_model, judge_model)
    if served == POLICY_JUDGE:
        return POLICY_JUDGE
    return {
        "base_url": settings.judge_base_url,
        "model": served,
        "api_key_env": settings.judge_api_key_env,
    }


def batch_shape(batch_size: int, rollouts: int | None) -> tuple[int, int]:
    """(groups_per_step, rollouts_per_group): whole groups, rounded up."""
    per_group = rollouts or min(DEFAULT_ROLLOUTS, batch_size)
    return math.ceil(batch_size / per_group), per_group


def train_spec(request: TrainRequest, settings: ApiSettings, *, agent: str) -> JobSpecModel:
    """The HTTP training API's body as a job spec; raises InvalidSpec with the job spec's
    field name.
    Without `use_ruler` the spec has no `reward`: the trainer writes out the environment's
    defaults. With it, RULER joins the defaults of `agent`, the environment's agent kind."""
    groups, rollouts = batch_shape(request.batch_size, request.rollouts_per_group)
    data: dict[str, Any] = {
        "name": request.model_name,
        "project": request.project,
        "base_model": request.base_model,
        "environment": request.environment or settings.environment,
        "steps": request.num_steps,
        "groups_per_step": groups,
        "rollouts_per_group": rollouts,
        "learning_rate": request.learning_rate,
        "task_prompt": request.task_prompt,
        "finetune": request.finetune,
    }
    if request.use_ruler:
        ruler = ScorerModel(
            name=RULER,
            params={"judge": judge_param(settings, request.judge_model)},
            # A judge that fails scores 0 instead of dropping the group: that API's jobs
            # keep training on the other scorers (its `independent_reward`).
            on_error="zero",
        )
        data["reward"] = [s.model_dump() for s in [*default_scorers(agent), ruler]]
    for key in ("max_turns", "max_tokens", "enable_thinking"):
        if getattr(request, key) is not None:
            data[key] = getattr(request, key)
    return validate_spec(data)


def judge_key_hint(field: str, message: str) -> str:
    """The reward service's "key not set" with the other way out: the fleet's own policy."""
    if not field.endswith("judge.api_key_env"):
        return message
    example = json.dumps({"gpt-4o": POLICY_JUDGE})
    return (
        f"{message}; set it there, or let the fleet's own policy judge: "
        f"ARTFLEET_JUDGE_MODEL_MAP='{example}' in the API's environment"
    )


def training_api_field(field: str) -> str:
    """A job spec field path (from the trainer or validate_spec) in the HTTP training
    API's words."""
    head = field.split(".")[0].split("[")[0]
    return TRAINING_API_FIELDS.get(head, field)


def _state(value: int) -> str:
    return pb.JobState.Name(value).removeprefix("JOB_STATE_").lower()


def step_out(summary: pb.StepSummary) -> StepOut:
    return StepOut(
        **json_format.MessageToDict(
            summary, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
        )
    )


def _time(message: Any, field: str) -> str | None:
    return getattr(message, field).ToJsonString() if message.HasField(field) else None


def job_out(job: pb.Job) -> JobOut:
    steps = [step_out(s) for s in job.steps]
    return JobOut(
        id=job.id,
        state=_state(job.state),  # type: ignore[arg-type]
        project=job.spec.project,
        model_name=job.spec.name,
        experiment=job.spec.experiment or DEFAULT_EXPERIMENT,
        completed_steps=job.completed_steps,
        total_steps=job.spec.steps,
        latest_reward=steps[-1].reward_mean if steps else None,
        error=job.error,
        trained_nothing=job.trained_nothing,
        policy=job.policy,
        created_at=_time(job, "created_at"),
        updated_at=_time(job, "updated_at"),
        steps=steps,
        evals=[eval_out(e) for e in job.evals],
        resumes=[resume_out(r) for r in job.resumes],
        spec=json_format.MessageToDict(job.spec, preserving_proto_field_name=True),
    )


def resume_out(resume: pb.JobResume) -> ResumeOut:
    return ResumeOut(
        time=_time(resume, "time"),
        state=_state(resume.state),  # type: ignore[arg-type]
        error=resume.error,
        completed_steps=resume.completed_steps,
    )


def event_out(event: pb.ProgressEvent) -> EventOut:
    kind = pb.EventKind.Name(event.kind).removeprefix("EVENT_KIND_").lower()
    return EventOut(
        seq=event.seq,
        kind=kind,  # type: ignore[arg-type]
        state=_state(event.state),  # type: ignore[arg-type]
        step=event.step,
        total_steps=event.total_steps,
        time=_time(event, "time"),
        message=event.message,
        summary=step_out(event.summary) if event.HasField("summary") else None,
        eval=eval_out(event.eval) if event.HasField("eval") else None,
        sft=sft_out(event.sft) if event.HasField("sft") else None,
    )


def sft_out(progress: pb.SftProgress) -> SftOut:
    return SftOut(
        epoch=progress.epoch,
        epochs=progress.epochs,
        batch=progress.batch,
        batches=progress.batches,
        loss=progress.loss if math.isfinite(progress.loss) else None,
        learning_rate=progress.learning_rate,
        done=progress.done,
        checkpoint_step=progress.checkpoint_step,
        epoch_losses=[v for v in progress.epoch_losses if math.isfinite(v)],
    )


def eval_out(summary: pb.EvalSummary) -> EvalOut:
    # EvalOut has some of the message's fields, under their names.
    return EvalOut.model_validate(summary, from_attributes=True)


def outcome_out(outcome: pb.RewardOutcome) -> OutcomeOut:
    return OutcomeOut(
        dropped=list(outcome.dropped),
        group_dropped=outcome.group_dropped,
        fail_job=outcome.fail_job,
        # ScorerFailureOut has the message's fields, one for one.
        failures=[
            ScorerFailureOut.model_validate(f, from_attributes=True) for f in outcome.failures
        ],
    )


def art_model_name(job: pb.Job) -> str:
    """The job's model as the trainer's Models RPCs name it (its ART model)."""
    return f"{job.spec.name}-{job.id}"


def checkpoints_out(job: pb.Job, info: trainer_pb2.ModelInfo) -> list[CheckpointOut]:
    """The checkpoints the trainer found on disk, each with the training step that saved
    it: checkpoint steps run ahead of training steps by an SFT adapter's."""
    offset = job.sft.checkpoint_step if job.sft.done else 0
    return [
        CheckpointOut(
            step=c.step,
            policy=f"{info.name}@{c.step}",
            training_step=c.step - offset if c.step > offset else None,
            best=c.best,
        )
        for c in info.checkpoints
    ]


def policy_judge_candidates(
    jobs: Sequence[pb.Job], project: str | None, model_name: str | None
) -> list[pb.Job]:
    """Jobs whose checkpoint may be the policy judge, newest first (as ListJobs answers):
    those with a checkpoint that did not fail (a failed job's policy is no judge anyone
    chose), of the named model when the request names one."""
    return [
        job
        for job in jobs
        if job.policy
        and job.state != pb.JOB_STATE_FAILED
        and (not project or job.spec.project == project)
        and (not model_name or job.spec.name == model_name)
    ]
