"""Rollouts without training, evaluation, models and health."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import grpc
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from artfleet.contracts import messages
from artfleet.specs.reward import RewardSpecModel, ScorerModel, default_scorers, reward_to_proto
from artfleet.specs.scorer_params import JUDGE, POLICY_JUDGE, RULER
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, rollout_pb2, trainer_pb2
from artfleet_api import __version__
from artfleet_api.errors import ApiError
from artfleet_api.mapping import (
    judge_key_hint,
    judge_param,
    outcome_out,
    policy_judge_candidates,
)
from artfleet_api.models import (
    DependencyOut,
    ErrorOut,
    EvaluateRequest,
    EvaluateResponse,
    HealthOut,
    ModelList,
    ModelOut,
    PluginOut,
    RolloutRequest,
    RolloutResponse,
    ScoreOut,
    TrajectoryOut,
)
from artfleet_api.routes_jobs import (
    ERRORS,
    backends,
    environment_info,
    latest_job,
)

router = APIRouter(responses=ERRORS)
# RunGroup's field names in the HTTP training API's words.
TASK_FIELDS = {
    "task.rollouts": "num_rollouts",
    "task.policy": "model",
    "task.model_base_url": "base_url",
}


def _first_scenario(info: rollout_pb2.EnvironmentInfo, environment: str) -> str:
    for split in ("train", *sorted(info.split_sizes)):
        for scenario in info.scenarios:
            if scenario.split == split:
                return scenario.id
    raise ApiError(422, f"environment {environment!r} has no scenarios", "environment")


async def _policy(request: Request, body: RolloutRequest) -> tuple[str, str]:
    """(model, base_url): an endpoint the request names, else the model's checkpoint."""
    if body.base_url is not None:
        return body.model or body.model_name, body.base_url
    job = await latest_job(request, body.project, body.model_name)
    if not job.policy:
        raise ApiError(409, f"{body.project}/{body.model_name} has no checkpoint yet", "model_name")
    return job.policy, request.app.state.settings.policy_base_url


@router.post("/rollout", response_model=RolloutResponse, tags=["rollouts"])
async def rollout(request: Request, body: RolloutRequest) -> RolloutResponse:
    """Runs one group of episodes (Rollout.RunGroup), scored by the environment's default
    reward (its agent kind's, as a job without `reward` is)."""
    settings = request.app.state.settings
    environment = body.environment or settings.environment
    info = await environment_info(request, environment)  # an unknown environment: 422 first
    first = _first_scenario(info, environment)
    model, base_url = await _policy(request, body)
    scenario = body.scenario_id or first
    task = rollout_pb2.GroupTask(
        job_id=f"api-{uuid.uuid4().hex[:12]}",
        step=0,
        group_id=uuid.uuid4().hex,
        environment=environment,
        scenario_id=scenario,
        rollouts=body.num_rollouts,
        max_turns=body.max_turns,
        model_base_url=base_url,
        policy=model,
        temperature=body.temperature,
        max_tokens=body.max_tokens,
        max_context_tokens=4096,
        reward=reward_to_proto(RewardSpecModel(reward=default_scorers(info.agent))),
        seed=body.seed,
        model_api_key_env=body.api_key_env or "",
        task_prompt=body.task_prompt,
        enable_thinking=body.enable_thinking,
    )
    try:
        reply = await backends(request).rollout.RunGroup(
            rollout_pb2.RunGroupRequest(task=task), timeout=settings.rollout_timeout_s
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
            raise
        field, _, message = (exc.details() or "").partition(": ")
        raise ApiError(422, message, TASK_FIELDS.get(field, field.removeprefix("task."))) from None
    notes: list[str] = []
    return RolloutResponse(
        model=model,
        base_url=base_url,
        environment=environment,
        scenario_id=scenario,
        trajectories=[
            TrajectoryOut.model_validate(messages.trajectory_to_dict(t))
            for t in reply.group.trajectories
        ],
        errors=[f"{e.type}: {e.message}" for e in reply.group.exceptions],
        outcome=outcome_out(reply.outcome),
        notes=notes,
    )


def _scorer(body: EvaluateRequest, judge: Any) -> ScorerModel:
    params: dict[str, Any] = {"judge": judge}
    if body.evaluation_prompt is not None:
        params["rubric"] = body.evaluation_prompt
    try:
        # zero: a judge that fails shows in outcome.failures instead of failing the call.
        return ScorerModel(name=RULER if body.use_ruler else JUDGE, params=params, on_error="zero")
    except ValidationError as exc:
        raise ApiError(422, str(exc.errors()[0]["msg"]), "judge_model") from None


def _group(body: EvaluateRequest) -> pb.TrajectoryGroup:
    group = pb.TrajectoryGroup()
    for i, t in enumerate(body.trajectories):
        try:
            proto = messages.trajectory_to_proto(t.messages, t.tools, t.reward)
        except messages.MessageError as exc:
            raise ApiError(422, exc.message, f"trajectories[{i}].{exc.field}") from None
        group.trajectories.append(proto)
    return group


async def _checkpoint_exists(request: Request, policy: str) -> bool:
    """Whether the trainer still has `name@step` (`models delete` may have removed it);
    a trainer that cannot say does not block the judge."""
    try:
        await backends(request).trainer.ModelsGet(
            trainer_pb2.ModelsGetRequest(model=policy),
            timeout=request.app.state.settings.rpc_timeout_s,
        )
    except grpc.aio.AioRpcError as exc:
        return exc.code() != grpc.StatusCode.NOT_FOUND
    return True


async def _judge_policy(request: Request, body: EvaluateRequest) -> pb.PolicyEndpoint:
    """The policy judge, named once here as an explicit `name@step` (the response says
    which): the newest checkpoint of a job that did not fail, of the named model if any."""
    settings = request.app.state.settings
    if body.project and body.model_name:
        await latest_job(request, body.project, body.model_name)  # 404 for an unknown model
    reply = await backends(request).trainer.ListJobs(
        trainer_pb2.ListJobsRequest(limit=0), timeout=settings.rpc_timeout_s
    )
    for job in policy_judge_candidates(reply.jobs, body.project, body.model_name):
        if await _checkpoint_exists(request, job.policy):
            return pb.PolicyEndpoint(model=job.policy, base_url=settings.policy_base_url)
    which = (
        f"{body.project}/{body.model_name} has none"
        if body.project and body.model_name
        else "no model has one"
    )
    raise ApiError(
        409,
        f"the policy judge needs a checkpoint of a job that did not fail: {which}",
        "judge_model",
    )


async def _validate_judge(request: Request, spec: pb.RewardSpec) -> None:
    """Asks the reward service first: a judge it cannot call (no key in its environment) is
    a 422 naming the setting, not a 200 whose every score failed."""
    try:
        await backends(request).reward.ValidateSpec(
            reward_pb2.ValidateSpecRequest(spec=spec),
            timeout=request.app.state.settings.rpc_timeout_s,
        )
    except grpc.aio.AioRpcError as exc:
        if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
            raise
        field, _, message = (exc.details() or "").partition(": ")
        raise ApiError(422, judge_key_hint(field, message or field), "judge_model") from None


@router.post("/evaluate", response_model=EvaluateResponse, tags=["evaluation"])
async def evaluate(request: Request, body: EvaluateRequest) -> EvaluateResponse:
    """Scores the trajectories with the judge (or RULER) through Reward.ScoreGroup."""
    group = _group(body)  # a message the proto cannot carry is a 422 before any call
    judge = judge_param(request.app.state.settings, body.judge_model)
    scorer = _scorer(body, judge)
    spec = reward_to_proto(RewardSpecModel(reward=[scorer]))
    described = judge if isinstance(judge, str) else judge["model"]
    if judge == POLICY_JUDGE:
        spec.policy.CopyFrom(await _judge_policy(request, body))
        described = f"policy ({spec.policy.model})"
    else:
        await _validate_judge(request, spec)
    reply = await backends(request).reward.ScoreGroup(
        reward_pb2.ScoreGroupRequest(
            group=group, episodes=[pb.Episode() for _ in body.trajectories], spec=spec
        ),
        timeout=request.app.state.settings.rollout_timeout_s,
    )
    scores = [
        ScoreOut(
            reward=s.reward,
            components=dict(s.components),
            dropped=s.dropped,
            metrics=dict(s.metrics),
            independent_reward=s.independent_reward if s.HasField("independent_reward") else None,
            logs=list(s.logs),
        )
        for s in reply.scores
    ]
    return EvaluateResponse(
        judge=described,
        policy=spec.policy.model if judge == POLICY_JUDGE else None,
        scores=scores,
        outcome=outcome_out(reply.outcome),
    )


@dataclass
class _Model:
    out: ModelOut
    art_names: list[str] = field(default_factory=list)  # its jobs' checkpoint folders


ACTIVE_STATES = ("queued", "running", "cancelling")


async def _models(request: Request) -> dict[tuple[str, str], _Model]:
    """One entry per project/model_name: its jobs that are active or still have
    checkpoints (what `artfleet models list` shows), so a deleted model is gone."""
    timeout = request.app.state.settings.rpc_timeout_s
    trainer = backends(request).trainer
    jobs, catalog = await asyncio.gather(
        trainer.ListJobs(trainer_pb2.ListJobsRequest(limit=0), timeout=timeout),
        trainer.ModelsList(trainer_pb2.ModelsListRequest(), timeout=timeout),
    )
    art_names = {info.job_id: info.name for info in catalog.models}
    models: dict[tuple[str, str], _Model] = {}
    for job in jobs.jobs:  # newest first: the first job seen of a model is its latest
        state = pb.JobState.Name(job.state).removeprefix("JOB_STATE_").lower()
        if job.id not in art_names and state not in ACTIVE_STATES:
            continue
        key = (job.spec.project, job.spec.name)
        model = models.get(key)
        if model is None:
            model = models[key] = _Model(
                ModelOut(
                    project=key[0],
                    model_name=key[1],
                    base_model=job.spec.base_model,
                    jobs=0,
                    latest_job_id=job.id,
                    state=state,  # type: ignore[arg-type]
                    completed_steps=job.completed_steps,
                    policy=job.policy,
                )
            )
        model.out.jobs += 1
        if job.id in art_names:
            model.art_names.append(art_names[job.id])
    return models


@router.get("/models", response_model=ModelList, tags=["models"])
async def list_models(request: Request) -> ModelList:
    """Models, derived from the trainer's jobs (one entry per project/model_name): those
    with a job running or checkpoints on the trainer."""
    return ModelList(models=[m.out for m in (await _models(request)).values()])


@router.delete(
    "/models/{project}/{model_name}",
    status_code=204,
    responses={409: {"model": ErrorOut, "description": "a job of this model is active"}},
    tags=["models"],
)
async def delete_model(request: Request, project: str, model_name: str) -> None:
    """Deletes every checkpoint of the model (each of its jobs' ART model, through
    Trainer.ModelsDelete). 404 for an unknown (or deleted) model, 409 while one of its
    jobs is active."""
    model = (await _models(request)).get((project, model_name))
    if model is None:
        raise ApiError(404, f"no model {project}/{model_name}", "model_name")
    if model.out.state in ACTIVE_STATES:
        raise ApiError(
            409,
            f"job {model.out.latest_job_id} of this model is {model.out.state}: cancel it first",
            "model_name",
        )
    trainer = backends(request).trainer
    for art_name in model.art_names:
        try:
            await trainer.ModelsDelete(
                trainer_pb2.ModelsDeleteRequest(model=art_name),
                timeout=request.app.state.settings.rpc_timeout_s,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # deleted meanwhile
                continue
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise ApiError(409, exc.details() or "model in use", "model_name") from None
            raise


async def _trainer_info(request: Request) -> trainer_pb2.TrainerInfo | None:
    try:
        return await backends(request).trainer.Describe(
            trainer_pb2.DescribeTrainerRequest(),
            timeout=request.app.state.settings.health_timeout_s,
        )
    except grpc.aio.AioRpcError:
        return None  # the dependency's own entry says why


async def _rollout_plugins(request: Request) -> list[PluginOut] | None:
    try:
        reply = await backends(request).rollout.ListPlugins(
            rollout_pb2.ListPluginsRequest(), timeout=request.app.state.settings.health_timeout_s
        )
    except grpc.aio.AioRpcError:
        return None  # the dependency's own entry says why
    return [
        PluginOut(
            group=p.group,
            name=p.name,
            package=p.package,
            version=p.version,
            state="broken" if p.state == "broken" else "loaded",
        )
        for p in reply.plugins
    ]


async def _judge_key_set(request: Request) -> bool | None:
    """Whether the reward service can call the hosted judge the HTTP bodies name by
    default: it refuses a spec whose judge's key variable is not set (ValidateSpec)."""
    settings = request.app.state.settings
    judge = {
        "base_url": settings.judge_base_url,
        "model": "gpt-4o",
        "api_key_env": settings.judge_api_key_env,
    }
    scorer = ScorerModel(name=JUDGE, params={"judge": judge})
    try:
        await backends(request).reward.ValidateSpec(
            reward_pb2.ValidateSpecRequest(spec=reward_to_proto(RewardSpecModel(reward=[scorer]))),
            timeout=settings.health_timeout_s,
        )
    except grpc.aio.AioRpcError as exc:
        return False if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else None
    return True


@router.get(
    "/health",
    response_model=HealthOut,
    responses={503: {"model": HealthOut, "description": "a dependency is down"}},
    tags=["ops"],
)
async def health(request: Request) -> JSONResponse:
    """Each dependency's state; 503 when one is down. No token needed."""
    states, info, judge_key, plugins = await asyncio.gather(
        backends(request).health(),
        _trainer_info(request),
        _judge_key_set(request),
        _rollout_plugins(request),
    )
    ok = all(s.ok for s in states.values())
    body = HealthOut(
        status="healthy" if ok else "unhealthy",
        version=__version__,
        art_backend=info.backend if info is not None else None,
        openai_configured=judge_key,
        wandb_configured=info.wandb_configured if info is not None else None,
        dependencies={n: DependencyOut(ok=s.ok, detail=s.detail) for n, s in states.items()},
        plugins=plugins,
    )
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)
