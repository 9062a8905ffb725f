"""Training: the HTTP training API's /train endpoints and the /jobs endpoints by id."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import grpc
from fastapi import APIRouter, Body, Header, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import Discriminator, Tag

from artfleet.specs.base import InvalidSpec
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2, trainer_pb2
from artfleet_api.backends import Backends
from artfleet_api.errors import ApiError
from artfleet_api.mapping import (
    art_model_name,
    checkpoints_out,
    job_out,
    judge_key_hint,
    train_spec,
    training_api_field,
)
from artfleet_api.models import (
    CheckpointOut,
    ErrorOut,
    JobList,
    JobOut,
    JobSubmit,
    TrainRequest,
    TrainResponse,
)
from artfleet_api.sse import job_events, resume_from

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 401, 404, 409, 413, 415, 422, 502, 503, 504)
}
router = APIRouter(responses=ERRORS)
log = logging.getLogger(__name__)


def _form(value: Any) -> str:
    return "JobSubmit" if isinstance(value, dict) and "spec" in value else "TrainRequest"


TrainBody = Annotated[
    Annotated[TrainRequest, Tag("TrainRequest")] | Annotated[JobSubmit, Tag("JobSubmit")],
    Discriminator(_form),
]


def backends(request: Request) -> Backends:
    result: Backends = request.app.state.backends
    return result


async def latest_job(request: Request, project: str, model_name: str) -> pb.Job:
    reply = await backends(request).trainer.ListJobs(
        trainer_pb2.ListJobsRequest(limit=0), timeout=request.app.state.settings.rpc_timeout_s
    )
    for job in reply.jobs:  # newest first
        if job.spec.project == project and job.spec.name == model_name:
            return job
    raise ApiError(404, f"no job trains {project}/{model_name}", "model_name")


async def environment_info(request: Request, name: str) -> rollout_pb2.EnvironmentInfo:
    """The rollout service's description of an environment; an unknown one, or a file its
    loader cannot read, is 422 naming `environment` (a field of the body), as /train
    answers it."""
    try:
        return await backends(request).rollout.DescribeEnvironment(
            rollout_pb2.DescribeEnvironmentRequest(name=name),
            timeout=request.app.state.settings.rpc_timeout_s,
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() not in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
            raise
        raise ApiError(422, exc.details() or "unknown environment", "environment") from None


IDEMPOTENCY_HEADER = "Idempotency-Key"
# The same key again (a client's retry, or calls racing) answers the job it first made.
IdempotencyKey = Annotated[
    str,
    Header(
        alias=IDEMPOTENCY_HEADER,
        min_length=1,
        max_length=255,
        description="the same key (with the same body) answers the job it made first",
    ),
]


async def _submit(request: Request, spec: JobSpecModel, idempotency_key: str) -> pb.Job:
    return await backends(request).trainer.SubmitJob(
        trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec), idempotency_key=idempotency_key),
        timeout=request.app.state.settings.rpc_timeout_s,
    )


def _refused(exc: grpc.aio.AioRpcError, body: TrainRequest | JobSubmit) -> ApiError:
    """The trainer's INVALID_ARGUMENT as a 422 naming the field as this body's sender
    knows it (the trainer names job-spec fields)."""
    field, _, message = (exc.details() or "").partition(": ")
    if not message:  # a message without a field
        field, message = "", field
    if field == "idempotency_key":  # the header's, not the body's
        return ApiError(422, f"{IDEMPOTENCY_HEADER}: {message}", IDEMPOTENCY_HEADER)
    message = f"{field}: {judge_key_hint(field, message)}" if field else message
    if isinstance(body, JobSubmit):
        return ApiError(422, message, f"spec.{field}" if field else "spec")
    return ApiError(422, message, training_api_field(field))


@router.post(
    "/train",
    status_code=202,
    response_model=TrainResponse,
    tags=["training"],
)
async def train(
    request: Request,
    body: Annotated[TrainBody, Body()],
    idempotency_key: IdempotencyKey = "",
) -> TrainResponse:
    """Start training: the HTTP training API's fields, or `{"spec": {...}}` with the full
    job spec. The trainer refuses a base model it cannot load (422 naming `base_model`).
    With `Idempotency-Key`, the same key answers the job it made (for a day); with
    another body, 422 naming the header."""
    if isinstance(body, JobSubmit):
        spec = body.spec
    else:
        settings = request.app.state.settings
        # RULER joins the environment's default scorers, which depend on its agent kind;
        # without RULER the trainer writes the defaults out itself.
        agent = ""
        if body.use_ruler:
            environment = body.environment or settings.environment
            agent = (await environment_info(request, environment)).agent
        try:
            spec = train_spec(body, settings, agent=agent)
        except InvalidSpec as exc:
            raise ApiError(422, exc.message, training_api_field(exc.field)) from None
    try:
        job = await _submit(request, spec, idempotency_key)
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
            raise
        raise _refused(exc, body) from None
    # By id: the model's newest job may be another one (submitted since, or at once).
    return TrainResponse(
        job_id=job.id,
        state=job_out(job).state,
        project=job.spec.project,
        model_name=job.spec.name,
        status_url=f"/jobs/{job.id}",
        stream_url=f"/jobs/{job.id}/stream",
        job=job_out(job),
    )


@router.get("/train/{project}/{model_name}/status", response_model=JobOut, tags=["training"])
async def train_status(request: Request, project: str, model_name: str) -> JobOut:
    """The model's latest job."""
    return job_out(await latest_job(request, project, model_name))


SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: `id` = event seq, `data` = an EventOut",
        "content": {
            "text/event-stream": {
                "schema": {
                    "type": "object",
                    "description": "one event; `data` is an EventOut as JSON",
                    "properties": {
                        "id": {"type": "string"},
                        "event": {"type": "string"},
                        "data": {"type": "string", "contentMediaType": "application/json"},
                    },
                }
            }
        },
    }
}


def _stream(request: Request, job_id: str, from_seq: int) -> StreamingResponse:
    return StreamingResponse(
        job_events(backends(request).trainer, job_id, from_seq),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/train/{project}/{model_name}/stream",
    response_class=StreamingResponse,
    responses=SSE_RESPONSE,
    tags=["training"],
)
async def train_stream(
    request: Request,
    project: str,
    model_name: str,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    """Progress of the model's latest job as SSE; reconnect with `Last-Event-ID`."""
    from_seq = resume_from(last_event_id)  # a bad header is a 422 before any lookup
    job = await latest_job(request, project, model_name)
    return _stream(request, job.id, from_seq)


@router.get("/jobs", response_model=JobList, tags=["jobs"])
async def list_jobs(
    request: Request, limit: Annotated[int, Query(ge=0, le=10_000)] = 100
) -> JobList:
    """Jobs, newest first (`limit=0`: all)."""
    reply = await backends(request).trainer.ListJobs(
        trainer_pb2.ListJobsRequest(limit=limit), timeout=request.app.state.settings.rpc_timeout_s
    )
    return JobList(jobs=[job_out(j) for j in reply.jobs])


async def _get(request: Request, job_id: str) -> pb.Job:
    return await backends(request).trainer.GetJob(
        trainer_pb2.GetJobRequest(job_id=job_id), timeout=request.app.state.settings.rpc_timeout_s
    )


async def _checkpoints(request: Request, job: pb.Job) -> list[CheckpointOut] | None:
    """The job's checkpoints on the trainer's disk (retention or `models delete` may have
    removed some): [] for a job with none, None when the trainer could not say."""
    try:
        info = await backends(request).trainer.ModelsGet(
            trainer_pb2.ModelsGetRequest(model=art_model_name(job)),
            timeout=request.app.state.settings.rpc_timeout_s,
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:
            return []
        log.warning("checkpoints of job %s not listed: %s", job.id, exc.details())
        return None
    return checkpoints_out(job, info)


@router.get("/jobs/{job_id}", response_model=JobOut, tags=["jobs"])
async def get_job(request: Request, job_id: str) -> JobOut:
    """The job, with the checkpoints that exist on the trainer's disk."""
    job = await _get(request, job_id)
    out = job_out(job)
    out.checkpoints = await _checkpoints(request, job)
    return out


@router.post("/jobs/{job_id}/cancel", response_model=JobOut, tags=["jobs"])
async def cancel_job(request: Request, job_id: str) -> JobOut:
    """Asks the job to stop after its running step (state `cancelling`, then `cancelled`)."""
    job = await backends(request).trainer.CancelJob(
        trainer_pb2.CancelJobRequest(job_id=job_id),
        timeout=request.app.state.settings.rpc_timeout_s,
    )
    return job_out(job)


@router.post("/jobs/{job_id}/resume", response_model=JobOut, tags=["jobs"])
async def resume_job(request: Request, job_id: str) -> JobOut:
    """Queues a `failed` or `cancelled` job again: it goes on after its last checkpoint,
    its steps and evals kept and what it was in `resumes`; 409 in any other state."""
    job = await backends(request).trainer.ResumeJob(
        trainer_pb2.ResumeJobRequest(job_id=job_id),
        timeout=request.app.state.settings.rpc_timeout_s,
    )
    return job_out(job)


@router.get(
    "/jobs/{job_id}/stream",
    response_class=StreamingResponse,
    responses=SSE_RESPONSE,
    tags=["jobs"],
)
async def job_stream(
    request: Request,
    job_id: str,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    """The job's progress as SSE; reconnect with `Last-Event-ID`."""
    from_seq = resume_from(last_event_id)
    await _get(request, job_id)  # an unknown id is a 404 before the stream starts
    return _stream(request, job_id, from_seq)
