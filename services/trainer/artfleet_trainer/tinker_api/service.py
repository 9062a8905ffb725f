"""The gRPC service `TinkerApi`: the Tinker-compatible API's state and queue on the trainer.

Calls that change a training client run one at a time in its seq_id order
(`ordering.ClientQueue`); samples run as they come. Each call answers at once with a
future (`futures.Futures`), its outcome retrieved later. A call that cannot be run is
refused at the request (INVALID_ARGUMENT naming the field, NOT_FOUND, RESOURCE_EXHAUSTED
naming the limit); one that fails while running fails its future with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import grpc

from artfleet.clients.replicas import split_urls
from artfleet.contracts.errors import (
    ArtfleetError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from artfleet.v1 import tinker_api_pb2 as pb
from artfleet.v1 import tinker_api_pb2_grpc
from artfleet_trainer import metrics
from artfleet_trainer.clients.inference_client import InferenceClient
from artfleet_trainer.serving.inference_service import InferenceServiceServing
from artfleet_trainer.settings import TrainerSettings
from artfleet_trainer.torch_backend import datum_training
from artfleet_trainer.torch_backend.training_clients import TrainingClients

from . import catalog
from .calls import Calls, datums_of
from .engine import BaseModels
from .futures import Futures
from .ordering import ClientQueue
from .runs import Runs, run_name
from .sampler import CompletionsSampler
from .sessions import Sampler, Sessions

if TYPE_CHECKING:
    from artfleet_trainer.torch_backend import TorchBackend

log = logging.getLogger(__name__)

USER_ERRORS = (InvalidArgument, NotFound, FailedPrecondition)
CLIENTS_LIMIT_SETTING = "ARTFLEET_TINKER_API_MAX_CLIENTS"
AUTO_MAX_CLIENTS = 64  # `auto`'s ceiling, however much memory is free
DEFAULT_RANK = 32  # a load_weights client's rank is the checkpoint's: sized as rank 32


class TinkerApiService(tinker_api_pb2_grpc.TinkerApiServicer):
    def __init__(
        self,
        settings: TrainerSettings,
        clients: TrainingClients,
        sampler: CompletionsSampler,
        bases: BaseModels,
    ) -> None:
        """`bases` maps a requested base model to the one the trainer loads and its
        context, raising InvalidArgument naming `base_model` when there is none."""
        self._settings = settings
        self._clients = clients
        self._sampler = sampler
        self._bases = bases
        self.runs = Runs(settings.art_path)
        self.sessions = Sessions(settings.tinker_api_idle_s)
        self.futures = Futures(settings.tinker_api_max_queued_calls)
        self._calls = Calls(clients, self.runs, self.sessions)
        self._queues: dict[str, ClientQueue] = {}  # live training clients by model id
        self._creates: dict[str, str] = {}  # model id -> the future creating it
        self._tasks: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None

    @classmethod
    def on(cls, settings: TrainerSettings, backend: TorchBackend) -> TinkerApiService:
        """The service of a torch backend's training clients, sampling where it serves."""
        listing = None
        if isinstance(backend.serving, InferenceServiceServing):
            # every replica serves the one base model with one context: any one answers
            url = split_urls(settings.inference_url)[0]
            listing = InferenceClient(url, settings.api_token.get_secret_value()).models
        return cls(
            settings,
            backend.training_clients,
            CompletionsSampler(backend.sampling_endpoint),
            BaseModels(settings, listing),
        )

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap(), name="tinker-api-reaper")

    async def stop(self) -> None:
        """Every waiting future fails (retryable): no client waits on a stopped trainer."""
        if self._reaper is not None:
            self._reaper.cancel()
        self.futures.fail_all("the trainer is stopping; send the call again once it is back")
        for queue in self._queues.values():
            await queue.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._sampler.close()

    # --- sessions ------------------------------------------------------------------------

    async def CreateSession(
        self, request: pb.CreateTrainingSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateTrainingSessionResponse:
        session = self.sessions.create(list(request.tags), dict(request.user_metadata))
        return pb.CreateTrainingSessionResponse(session_id=session.session_id)

    async def Heartbeat(
        self, request: pb.SessionHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> pb.SessionHeartbeatResponse:
        self.sessions.heartbeat(request.session_id)
        return pb.SessionHeartbeatResponse()

    async def FinishSession(
        self, request: pb.FinishSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.FinishSessionResponse:
        self.sessions.get(request.session_id).finished = True
        await self._release_ended()
        return pb.FinishSessionResponse()

    async def _reap(self) -> None:
        pause = min(self.sessions.idle_s / 4, 10.0)
        while True:
            await asyncio.sleep(pause)
            try:
                await self._release_ended()
            except Exception:
                log.exception("releasing the clients of ended sessions failed")

    async def _release_ended(self) -> None:
        for session in self.sessions.expired():
            for model_id in sorted(session.clients):
                await self._release(model_id, f"its session {session.session_id} ended")

    async def _release(self, model_id: str, why: str) -> None:
        queue = self._queues.pop(model_id, None)
        self._creates.pop(model_id, None)
        if queue is not None:
            for request_id in queue.waiting_ids():
                self.futures.fail(request_id, f"training client {model_id} was released: {why}")
            await queue.close()
        await self._clients.release(run_name(model_id))
        metrics.TINKER_CLIENTS.set(len(self._queues))
        log.info("released training client %s (%s); its saved weights stay", model_id, why)

    # --- queued calls --------------------------------------------------------------------

    async def Submit(
        self, request: pb.TrainingCall, context: grpc.aio.ServicerContext
    ) -> pb.Promise:
        op = request.WhichOneof("op")
        if op is None:
            raise InvalidArgument("the call names no operation", "op")
        if op == "sample":
            return await self._submit_sample(request.sample)
        if op == "create_model" or (
            op == "load_weights" and request.load_weights.HasField("model_seq_id")
        ):
            return await self._submit_create(request, op)
        queue = self._queue(request.model_id)
        if op == "pass_over":  # refused at the API's front: nothing to run, no gap left
            log.info(
                "%s: seq_id %d refused by the front (%s)",
                request.model_id,
                request.seq_id,
                request.pass_over.reason[:200],
            )
            queue.refused(request.seq_id)
            return pb.Promise(model_id=request.model_id)
        known = queue.known(request.seq_id)
        if known is not None:  # the same call again (a retry): the same future
            return pb.Promise(request_id=known, model_id=request.model_id)
        if request.seq_id < queue.next_seq:
            raise InvalidArgument(
                f"seq_id {request.seq_id} was already used by this training client "
                f"(next: {queue.next_seq})",
                "seq_id",
            )
        try:
            run = self._checked(request, op)
        except ArtfleetError:
            queue.refused(request.seq_id)  # the client's next call must not wait for it
            raise
        request_id = self.futures.new()
        queue.submit(request.seq_id, request_id, lambda: self._settle(request_id, op, run))
        return pb.Promise(request_id=request_id, model_id=request.model_id)

    def _queue(self, model_id: str) -> ClientQueue:
        queue = self._queues.get(model_id)
        if queue is None:
            raise NotFound(
                f"training client {model_id!r} is not loaded (unknown, released when its "
                "session ended, or the trainer restarted): create one from its saved weights"
            )
        return queue

    def _checked(
        self, call: pb.TrainingCall, op: str
    ) -> Callable[[], Awaitable[pb.RetrieveResponse]]:
        """The call's work, once what can be checked before it runs is (refused here)."""
        model_id = call.model_id
        if op == "forward_backward":
            fb = call.forward_backward
            datums, config = datums_of(fb), dict(fb.loss_fn_config)
            spec = self._clients.check(run_name(model_id), datums, fb.loss_fn, config)
            return lambda: self._calls.forward_backward(model_id, fb, datums, spec)
        if op == "optim_step":
            return lambda: self._calls.optim_step(model_id, call.optim_step)
        if op == "save_weights":
            return lambda: self._calls.save_weights(model_id, call.save_weights)
        if op == "save_for_sampler":
            return lambda: self._calls.save_for_sampler(model_id, call.save_for_sampler)
        if op == "load_weights":
            self.runs.resolve(call.load_weights.path)  # NOT_FOUND now, not in the future
            return lambda: self._calls.load(model_id, call.load_weights)
        raise InvalidArgument(f"{op} takes no training client", "op")

    async def _submit_create(self, call: pb.TrainingCall, op: str) -> pb.Promise:
        session = self.sessions.get(call.session_id)
        number = (
            call.create_model.model_seq_id
            if op == "create_model"
            else call.load_weights.model_seq_id
        )
        model_id = f"{session.session_id}:train:{number}"
        if model_id in self._creates:
            return pb.Promise(request_id=self._creates[model_id], model_id=model_id)
        run = await self._create_call(call, op, session.session_id, model_id)
        self._check_room(call.create_model.rank if op == "create_model" else 0)
        request_id = self.futures.new()
        self._creates[model_id] = request_id
        queue = ClientQueue()  # the create is its call 0: later calls wait for it
        self._queues[model_id] = queue
        queue.submit(0, request_id, lambda: self._settle(request_id, op, run, model_id))
        return pb.Promise(request_id=request_id, model_id=model_id)

    def _check_room(self, rank: int) -> None:
        """ResourceExhausted naming what is full: the setting's number of clients, or (auto)
        the device's memory for one more tenant."""
        limit = self._settings.tinker_api_max_clients
        loaded = len(self._queues)
        if limit != "auto":
            if loaded >= limit:
                raise ResourceExhausted(
                    f"{limit} training clients are loaded ({CLIENTS_LIMIT_SETTING}); end a "
                    "session or release its clients first"
                )
            return
        room, figures = self._clients.room(rank or DEFAULT_RANK)
        if loaded >= AUTO_MAX_CLIENTS or room < 1:
            full = (
                f"the limit of {AUTO_MAX_CLIENTS}"
                if loaded >= AUTO_MAX_CLIENTS
                else f"the device's memory ({figures})"
            )
            raise ResourceExhausted(
                f"{loaded} training clients are loaded: {full} ({CLIENTS_LIMIT_SETTING}=auto); "
                "end a session or release its clients first, or set a number"
            )

    async def _create_call(
        self, call: pb.TrainingCall, op: str, session_id: str, model_id: str
    ) -> Callable[[], Awaitable[pb.RetrieveResponse]]:
        if op == "create_model":
            create = call.create_model
            catalog.check_lora(create)
            base = await self._bases.base(create.base_model)
            return lambda: self._calls.create(session_id, model_id, base, create)
        load = call.load_weights
        record, _, _ = self.runs.resolve(load.path)
        create = pb.CreateModelOp(
            model_seq_id=load.model_seq_id, base_model=record.base_model, rank=record.lora_rank
        )
        base = await self._bases.base(record.base_model)

        async def create_then_load() -> pb.RetrieveResponse:
            await self._calls.create(session_id, model_id, base, create)
            return await self._calls.load(model_id, load)

        return create_then_load

    async def _settle(
        self,
        request_id: str,
        op: str,
        run: Callable[[], Awaitable[pb.RetrieveResponse]],
        created: str = "",
    ) -> None:
        """Runs one call and records its outcome in its future; a failed create leaves
        no client behind."""
        try:
            self.futures.resolve(request_id, await run())
            metrics.TINKER_CALLS.labels(op=op, outcome="ok").inc()
            metrics.TINKER_CLIENTS.set(len(self._queues))
            return
        except USER_ERRORS as exc:
            self.futures.fail(request_id, exc.message, "user")
            metrics.TINKER_CALLS.labels(op=op, outcome="refused").inc()
        except ArtfleetError as exc:
            self.futures.fail(request_id, exc.message, "server")
            metrics.TINKER_CALLS.labels(op=op, outcome="failed").inc()
        except Exception as exc:
            log.exception("Tinker API call %s failed", request_id)
            self.futures.fail(request_id, f"internal error: {type(exc).__name__}: {exc}")
            metrics.TINKER_CALLS.labels(op=op, outcome="failed").inc()
        if created:
            self._queues.pop(created, None)
            self._creates.pop(created, None)

    async def _submit_sample(self, op: pb.SampleOp) -> pb.Promise:
        sampler = self.sessions.sampler(op.sampling_session_id)
        catalog.check_sample(op)
        op = catalog.fit_sample(op, sampler.context)
        request_id = self.futures.new()
        served = sampler.served_name

        async def sample() -> pb.RetrieveResponse:
            return pb.RetrieveResponse(sample=await self._sampler.sample(served, op))

        task = asyncio.create_task(
            self._settle(request_id, "sample", sample), name=f"sample-{request_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        ids = [f"{request_id}:{i}" for i in range(max(op.num_samples, 1))]
        return pb.Promise(request_id=request_id, sample_sequence_ids=ids)

    async def Retrieve(
        self, request: pb.RetrieveRequest, context: grpc.aio.ServicerContext
    ) -> pb.RetrieveResponse:
        wait = min(max(request.wait_s, 0.0), 60.0)
        return await self.futures.wait(request.request_id, wait)

    # --- synchronous reads ---------------------------------------------------------------

    async def GetInfo(
        self, request: pb.GetInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.TrainingClientInfo:
        self._queue(request.model_id)
        info = self._clients.info(run_name(request.model_id))
        record = self.runs.get(request.model_id)
        # The base as the client named it: its tokenizer loads by that name (a folder's
        # works offline).
        return pb.TrainingClientInfo(
            model_id=request.model_id,
            base_model=record.base_model,
            tokenizer_id=record.base_model,
            arch=info.arch,
            lora_rank=record.lora_rank,
        )

    async def CreateSamplingSession(
        self, request: pb.CreateSamplingSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.SamplingSession:
        session = self.sessions.get(request.session_id)
        sampler_id = f"{session.session_id}:sample:{request.sampling_session_seq_id}"
        if request.model_path:
            record, saved, _ = self.runs.resolve(request.model_path)
            served = f"{run_name(record.training_run_id)}@{saved.step}"
            context = (await self._bases.base(record.base_model)).context
            sampler = Sampler(sampler_id, record.base_model, request.model_path, served, context)
        elif request.base_model:
            base = await self._bases.base(request.base_model)
            sampler = Sampler(sampler_id, request.base_model, "", base.name, base.context)
        else:
            raise InvalidArgument("name the weights to sample (model_path) or a base_model")
        session.samplers[sampler_id] = sampler
        return catalog.sampling_session(sampler)

    async def GetSampler(
        self, request: pb.GetSamplerRequest, context: grpc.aio.ServicerContext
    ) -> pb.SamplingSession:
        return catalog.sampling_session(self.sessions.sampler(request.sampler_id))

    async def ListRuns(
        self, request: pb.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRunsResponse:
        records = self.runs.all()
        limit = request.limit or 20
        page = records[request.offset : request.offset + limit]
        return pb.ListRunsResponse(
            runs=[catalog.run(r, r.training_run_id in self._queues, self.runs) for r in page],
            total=len(records),
        )

    async def GetRun(
        self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.TrainingRun:
        record = self.runs.get(request.training_run_id)
        return catalog.run(record, record.training_run_id in self._queues, self.runs)

    async def ListCheckpoints(
        self, request: pb.ListCheckpointsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListCheckpointsResponse:
        record = self.runs.get(request.training_run_id)
        return pb.ListCheckpointsResponse(
            checkpoints=[catalog.checkpoint(record, s, self.runs) for s in record.saves]
        )

    async def DeleteCheckpoint(
        self, request: pb.DeleteCheckpointRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteCheckpointResponse:
        await catalog.delete_checkpoint(
            self.runs, self._clients, request.training_run_id, request.checkpoint_id
        )
        return pb.DeleteCheckpointResponse()

    async def WeightsInfo(
        self, request: pb.WeightsInfoRequest, context: grpc.aio.ServicerContext
    ) -> pb.WeightsInfoResponse:
        record, _, _ = self.runs.resolve(request.tinker_path)
        return pb.WeightsInfoResponse(
            base_model=record.base_model,
            lora_rank=record.lora_rank,
            train_mlp=True,
            train_attn=True,
            train_unembed=False,
        )

    async def Capabilities(
        self, request: pb.CapabilitiesRequest, context: grpc.aio.ServicerContext
    ) -> pb.CapabilitiesResponse:
        models = [
            pb.SupportedModel(model_name=base.name, max_context_length=base.context)
            for base in await self._bases.known()
        ]
        return pb.CapabilitiesResponse(models=models, loss_fns=list(datum_training.LOSSES))
