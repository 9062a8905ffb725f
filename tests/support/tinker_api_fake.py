"""A stand-in for the trainer's TinkerApi gRPC service: canned replies, every request
and its metadata recorded, any method made to fail with a chosen status; and the API app
in front of it, served in-process (a real gRPC server on a free port, the app through
httpx's ASGI transport, both on the test's event loop)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import httpx

from artfleet.runtime.service import free_port
from artfleet.v1 import tinker_api_pb2 as pb
from artfleet.v1 import tinker_api_pb2_grpc as pb_grpc
from artfleet_api.app import create_app
from artfleet_api.server import ApiServer
from artfleet_api.settings import ApiSettings

TOKEN = "unit-test-token-0123456789"
BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
KEY = {"X-API-Key": f"tml-{TOKEN}"}


def checkpoint(name: str, kind: str = "weights", run: str = "S:train:0") -> pb.Checkpoint:
    return pb.Checkpoint(
        checkpoint_id=f"{kind}/{name}",
        checkpoint_type="training" if kind == "weights" else "sampler",
        time=1_700_000_000.0,
        tinker_path=f"tinker://{run}/{kind}/{name}",
        size_bytes=1234,
        step=3,
    )


RUN = pb.TrainingRun(
    training_run_id="S:train:0",
    base_model=BASE_MODEL,
    lora_rank=8,
    last_request_time=1_700_000_100.0,
    last_checkpoint=checkpoint("step_3"),
    user_metadata={"owner": "unit"},
    loaded=True,
)


@dataclass
class FakeTinkerApi(pb_grpc.TinkerApiServicer):
    requests: list[tuple[str, Any]] = field(default_factory=list)
    metadata: list[dict[str, str]] = field(default_factory=list)
    failures: dict[str, tuple[grpc.StatusCode, str]] = field(default_factory=dict)
    outcomes: dict[str, pb.RetrieveResponse] = field(default_factory=dict)
    promised_model_id: str | None = None  # overrides the model id Submit answers

    async def _take(self, name: str, request: Any, context: Any) -> None:
        self.requests.append((name, request))
        self.metadata.append(dict(context.invocation_metadata()))
        if name in self.failures:
            code, details = self.failures[name]
            await context.abort(code, details)

    def last(self, name: str) -> Any:
        return [r for n, r in self.requests if n == name][-1]

    async def CreateSession(self, request: Any, context: Any) -> Any:
        await self._take("CreateSession", request, context)
        return pb.CreateTrainingSessionResponse(session_id="S")

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        await self._take("Heartbeat", request, context)
        return pb.SessionHeartbeatResponse()

    async def FinishSession(self, request: Any, context: Any) -> Any:
        await self._take("FinishSession", request, context)
        return pb.FinishSessionResponse()

    async def Submit(self, call: pb.TrainingCall, context: Any) -> Any:
        await self._take("Submit", call, context)
        request_id = f"R{len(self.requests)}"
        model_id = call.model_id
        if call.HasField("create_model"):
            model_id = f"{call.session_id}:train:{call.create_model.model_seq_id}"
        elif call.HasField("load_weights") and call.load_weights.HasField("model_seq_id"):
            model_id = f"{call.session_id}:train:{call.load_weights.model_seq_id}"
        if self.promised_model_id is not None:
            model_id = self.promised_model_id
        sequences = [f"{request_id}:{k}" for k in range(call.sample.num_samples)]
        return pb.Promise(request_id=request_id, model_id=model_id, sample_sequence_ids=sequences)

    async def Retrieve(self, request: pb.RetrieveRequest, context: Any) -> Any:
        await self._take("Retrieve", request, context)
        return self.outcomes.get(request.request_id, pb.RetrieveResponse(pending=True))

    async def GetInfo(self, request: pb.GetInfoRequest, context: Any) -> Any:
        await self._take("GetInfo", request, context)
        return pb.TrainingClientInfo(
            model_id=request.model_id,
            base_model=BASE_MODEL,
            tokenizer_id=BASE_MODEL,
            arch="llama",
            lora_rank=8,
        )

    async def CreateSamplingSession(self, request: Any, context: Any) -> Any:
        await self._take("CreateSamplingSession", request, context)
        session_id = f"{request.session_id}:sample:{request.sampling_session_seq_id}"
        return pb.SamplingSession(
            sampling_session_id=session_id, base_model=BASE_MODEL, model_path=request.model_path
        )

    async def GetSampler(self, request: pb.GetSamplerRequest, context: Any) -> Any:
        await self._take("GetSampler", request, context)
        return pb.SamplingSession(sampling_session_id=request.sampler_id, base_model=BASE_MODEL)

    async def ListRuns(self, request: Any, context: Any) -> Any:
        await self._take("ListRuns", request, context)
        return pb.ListRunsResponse(runs=[RUN], total=7)

    async def GetRun(self, request: Any, context: Any) -> Any:
        await self._take("GetRun", request, context)
        return RUN

    async def ListCheckpoints(self, request: Any, context: Any) -> Any:
        await self._take("ListCheckpoints", request, context)
        return pb.ListCheckpointsResponse(
            checkpoints=[checkpoint("step_3"), checkpoint("step_3", "sampler_weights")]
        )

    async def DeleteCheckpoint(self, request: Any, context: Any) -> Any:
        await self._take("DeleteCheckpoint", request, context)
        return pb.DeleteCheckpointResponse()

    async def WeightsInfo(self, request: Any, context: Any) -> Any:
        await self._take("WeightsInfo", request, context)
        return pb.WeightsInfoResponse(
            base_model=BASE_MODEL, lora_rank=8, train_mlp=True, train_attn=True
        )

    async def Capabilities(self, request: Any, context: Any) -> Any:
        await self._take("Capabilities", request, context)
        model = pb.SupportedModel(model_name=BASE_MODEL, max_context_length=2048)
        return pb.CapabilitiesResponse(models=[model], loss_fns=["cross_entropy"])


@dataclass
class Front:
    client: httpx.AsyncClient
    trainer: FakeTinkerApi
    settings: ApiSettings
    server: grpc.aio.Server


@asynccontextmanager
async def tinker_api_front(served: bool = False, **settings: Any) -> AsyncIterator[Front]:
    """The API app before a FakeTinkerApi; the client sends the key as SDKs do.
    `served`: the API served by uvicorn on a free port (ApiServer, port 0), the client
    talking HTTP to it (what the API's middleware sees of real sockets: Content-Length,
    chunked bodies); else in-process."""
    trainer = FakeTinkerApi()
    server = grpc.aio.server()
    pb_grpc.add_TinkerApiServicer_to_server(trainer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    values: dict[str, Any] = {
        "api_token": TOKEN,
        "trainer_target": f"127.0.0.1:{port}",
        "redis_url": f"redis://127.0.0.1:{free_port()}/0",  # never reached
        "rpc_timeout_s": 5.0,
        "tinker_api_wait_s": 0.5,
        **settings,
    }
    api_settings = ApiSettings(**values)
    try:
        if served:
            async with _served(api_settings) as client:
                yield Front(client, trainer, api_settings, server)
        else:
            async with _in_process(api_settings) as client:
                yield Front(client, trainer, api_settings, server)
    finally:
        await server.stop(None)


@asynccontextmanager
async def _in_process(settings: ApiSettings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings)
    # raise_app_exceptions off: a 500 reaches the test as the response clients get.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://api", headers=KEY) as client,
    ):
        yield client


@asynccontextmanager
async def _served(settings: ApiSettings) -> AsyncIterator[httpx.AsyncClient]:
    api = ApiServer(settings.model_copy(update={"host": "127.0.0.1", "port": 0}))
    await api.start()
    try:
        base_url = f"http://127.0.0.1:{api.port}"
        async with httpx.AsyncClient(base_url=base_url, headers=KEY, timeout=60) as client:
            yield client
    finally:
        await api.stop()
