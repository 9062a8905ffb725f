"""Trainer gRPC API: jobs in, progress out. Validation happens here, before Redis."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from artfleet.contracts import base_models
from artfleet.contracts.errors import InvalidArgument
from artfleet.contracts.records import BadRecords, refuse_bad_records
from artfleet.specs.job import (
    JobSpecModel,
    config_hash,
    mcp_config_json,
    spec_from_proto,
    spec_to_proto,
    with_default_reward,
)
from artfleet.specs.scorer_params import MCP_EVALUATE
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2, trainer_pb2, trainer_pb2_grpc
from artfleet_trainer import metrics
from artfleet_trainer.clients.reward_client import RewardClient
from artfleet_trainer.clients.rollouts import RolloutClient, split_ids
from artfleet_trainer.jobs import grpo, wandb_runs
from artfleet_trainer.jobs.context_limit import ContextLimits
from artfleet_trainer.jobs.evals import check_eval_split
from artfleet_trainer.jobs.images import ImageChecker
from artfleet_trainer.jobs.models import ModelCatalog, parse_ref
from artfleet_trainer.jobs.store import JobStore, check_resumable
from artfleet_trainer.sft import phase as sft_phase

log = logging.getLogger(__name__)


class TrainerServicer(trainer_pb2_grpc.TrainerServicer):
    def __init__(
        self,
        store: JobStore,
        rollout: RolloutClient,
        reward: RewardClient,
        backend_available: Callable[[str], str],
        art_path: str = ".art",
        images: ImageChecker | None = None,
        backend: str = "torch",
        base_model_map: dict[str, str] | None = None,
        retire: Callable[[str, list[int]], Awaitable[None]] | None = None,
        context_limits: ContextLimits | None = None,
    ) -> None:
        self._store = store
        self._rollout = rollout
        self._reward = reward
        # Returns "" when this trainer can run the backend, else why not.
        self._backend_available = backend_available
        self._models = ModelCatalog(store, art_path)
        self._images = images  # None: no sandbox to ask (unit tests of the API alone)
        self._art_path = art_path
        self._backend = backend
        self._base_model_map = base_model_map or {}
        # The backend's: the inference service stops serving deleted checkpoints (as after
        # retention); None where nothing outside the ART path serves them.
        self._retire = retire
        # What serves the policy, asked whether it takes the job's context (default: the
        # trainer's own torch server, which reads the base model's config).
        self._context_limits = context_limits or ContextLimits()

    async def SubmitJob(
        self, request: trainer_pb2.SubmitJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.Job:
        if not request.HasField("spec"):
            raise InvalidArgument("a job needs a spec", "spec")
        key = _idempotency_key(request.idempotency_key)
        spec = spec_from_proto(request.spec)
        grpo.check_backend(spec)
        await asyncio.to_thread(sft_phase.check_spec, spec)  # reads the data file
        why_not = self._backend_available(spec.backend)
        if why_not:
            raise InvalidArgument(why_not, "backend")
        spec = await asyncio.to_thread(self._base_model, spec)
        await self._context_limits.check(spec)
        info = await self._rollout.describe(spec.environment)
        bad = BadRecords.from_skipped(info.skipped)
        refuse_bad_records(bad, spec.skip_bad_records, "environment")
        split_ids(info, spec.environment, spec.split)
        spec = await self._written_out_reward(spec, info)
        await check_eval_split(self._rollout, spec)
        if self._images is not None:
            await self._images.check(spec)
        message = spec_to_proto(spec)
        await self._reward.validate(message.reward)
        job, created = await self._store.submit(message, config_hash(spec), key)
        if created:
            metrics.JOBS_SUBMITTED.inc()
            await self._note_skipped(job.id, spec.environment, bad)
        return job

    async def _note_skipped(self, job_id: str, environment: str, bad: BadRecords) -> None:
        """The bad records a skip_bad_records job leaves out: logged, and in the job's
        events (`jobs watch` prints them)."""
        if not bad.count:
            return
        note = f"environment {environment}: left out {bad.summary()}"
        log.warning("job %s: %s", job_id, note)
        await self._store.emit(job_id, pb.ProgressEvent(kind=pb.EVENT_KIND_LOG, message=note))

    async def _written_out_reward(
        self, spec: JobSpecModel, info: rollout_pb2.EnvironmentInfo
    ) -> JobSpecModel:
        """The agent kind's default reward where the spec has none; a job scored by an MCP
        environment's evaluate tool is refused now when its server cannot give one."""
        spec = with_default_reward(spec, info.agent)
        if info.agent == "mcp" and any(s.name == MCP_EVALUATE for s in spec.reward):
            await self._rollout.describe(
                spec.environment, probe_evaluate=True, mcp_config=mcp_config_json(spec)
            )
        return spec

    def _base_model(self, spec: JobSpecModel) -> JobSpecModel:
        """The spec with its base model mapped; refused now unless this trainer loads it
        (not at run time). ART's backend (Unsloth) downloads hub ids itself."""
        base_model = base_models.resolve(spec.base_model, self._base_model_map)
        if spec.backend == "torch":
            base_models.check_base_model(base_model, self._art_path, self._base_model_map)
        return spec.model_copy(update={"base_model": base_model})

    async def GetJob(
        self, request: trainer_pb2.GetJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.Job:
        return await self._store.get_with_position(_job_id(request.job_id))

    async def ListJobs(
        self, request: trainer_pb2.ListJobsRequest, context: grpc.aio.ServicerContext
    ) -> trainer_pb2.ListJobsResponse:
        if request.limit < 0:
            raise InvalidArgument("must be >= 0", "limit")
        jobs = await self._store.list(request.limit, experiment=request.experiment)
        return trainer_pb2.ListJobsResponse(jobs=jobs)

    async def CancelJob(
        self, request: trainer_pb2.CancelJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.Job:
        await self._store.request_cancel(_job_id(request.job_id))
        return await self._store.get(request.job_id)

    async def ResumeJob(
        self, request: trainer_pb2.ResumeJobRequest, context: grpc.aio.ServicerContext
    ) -> pb.Job:
        job = await self._store.get(_job_id(request.job_id))
        check_resumable(job)  # an unknown job, or one in another state, is said first
        # The scorers are checked again, as at submit: the reward service may have changed
        # since (a job that failed on its scorers is resumed to try them again).
        await self._reward.validate(job.spec.reward)
        job = await self._store.resume(job.id)
        return await self._store.get_with_position(job.id)

    async def WatchJob(
        self, request: trainer_pb2.WatchJobRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ProgressEvent]:
        if request.from_seq < 0:
            raise InvalidArgument("must be >= 0", "from_seq")
        async for event in self._store.events(_job_id(request.job_id), request.from_seq):
            yield event

    # ------------------------------------------------------------ models
    async def ModelsList(
        self, request: trainer_pb2.ModelsListRequest, context: grpc.aio.ServicerContext
    ) -> trainer_pb2.ModelsListResponse:
        return trainer_pb2.ModelsListResponse(models=await self._models.models(request.experiment))

    async def ModelsGet(
        self, request: trainer_pb2.ModelsGetRequest, context: grpc.aio.ServicerContext
    ) -> trainer_pb2.ModelInfo:
        return await self._models.get(request.model)

    async def ModelsDelete(
        self, request: trainer_pb2.ModelsDeleteRequest, context: grpc.aio.ServicerContext
    ) -> trainer_pb2.ModelsDeleteResponse:
        deleted = await self._models.delete(request.model)
        await self._retired(parse_ref(request.model)[0], deleted)
        return trainer_pb2.ModelsDeleteResponse(deleted_steps=deleted)

    async def ModelsPrune(
        self, request: trainer_pb2.ModelsPruneRequest, context: grpc.aio.ServicerContext
    ) -> trainer_pb2.ModelsPruneResponse:
        reply = await self._models.prune(request.model, request.keep, request.dry_run)
        if not reply.dry_run:
            await self._retired(reply.model, [c.step for c in reply.deleted])
        return reply

    async def _retired(self, name: str, steps: list[int]) -> None:
        if steps and self._retire is not None:
            await self._retire(name, steps)

    async def Describe(
        self, request: trainer_pb2.DescribeTrainerRequest, context: grpc.aio.ServicerContext
    ) -> trainer_pb2.TrainerInfo:
        info = trainer_pb2.TrainerInfo(backend=self._backend, wandb_configured=wandb_runs.enabled())
        if self._backend == "torch":
            known = await asyncio.to_thread(
                base_models.known_base_models, self._art_path, self._base_model_map
            )
            info.base_models.extend(known)
        return info

    async def ModelsExport(
        self, request: trainer_pb2.ModelsExportRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[trainer_pb2.ModelsExportChunk]:
        async for chunk in self._models.export(request.model):
            yield chunk


# Keys are the client's (the CLI's a uuid); bounded, as each is a Redis key for a day.
MAX_IDEMPOTENCY_KEY = 255


def _idempotency_key(key: str) -> str:
    if len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise InvalidArgument(
            f"must be printable and at most {MAX_IDEMPOTENCY_KEY} characters", "idempotency_key"
        )
    return key


def _job_id(job_id: str) -> str:
    if not job_id:
        raise InvalidArgument("is required", "job_id")
    return job_id
