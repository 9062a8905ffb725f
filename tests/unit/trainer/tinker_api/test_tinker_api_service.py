"""The trainer's Tinker-compatible API service on a real TorchBackend (a tiny random Llama
wearing SmolLM2's tokenizer): training clients created, trained, saved and listed
through their futures; seq_id order and retries; two clients that never touch each
other's weights; limits and refusals that name what they refuse."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from api_fleet import tiny_model
from pydantic import SecretStr

from artfleet.contracts.errors import (
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
)
from artfleet.v1 import tinker_api_pb2 as pb
from artfleet_trainer.settings import TrainerSettings
from artfleet_trainer.tinker_api.engine import BaseModels
from artfleet_trainer.tinker_api.futures import Futures
from artfleet_trainer.tinker_api.sampler import CompletionsSampler
from artfleet_trainer.tinker_api.service import TinkerApiService
from artfleet_trainer.torch_backend import TorchBackend

Context: Any = None


@pytest.fixture(scope="module")
def model_dir(module_tmp: Callable[[str], Path]) -> Path:
    return tiny_model(module_tmp("tiny") / "model")


@asynccontextmanager
async def _started(tmp_path: Path, **settings: Any) -> AsyncIterator[TinkerApiService]:
    """The service on a TorchBackend of its own, both stopped on exit."""
    trainer = TrainerSettings(art_path=str(tmp_path / "art"), api_token=SecretStr("t"), **settings)
    backend = TorchBackend(path=trainer.art_path, num_threads=1, train_num_threads=1)
    api = TinkerApiService.on(trainer, backend)
    api.start()
    try:
        yield api
    finally:
        await api.stop()
        await backend.close()


def _backend(api: TinkerApiService) -> TorchBackend:
    return api._clients._backend


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[TinkerApiService]:
    async with _started(tmp_path, tinker_api_max_clients=2) as api:
        yield api


async def _result(api: TinkerApiService, promise: pb.Promise) -> pb.RetrieveResponse:
    outcome = await api.Retrieve(
        pb.RetrieveRequest(request_id=promise.request_id, wait_s=60), Context
    )
    assert outcome.WhichOneof("outcome") != "failure", outcome.failure.message
    return outcome


async def _client(
    api: TinkerApiService, session: str, number: int, base: Path, rank: int = 4
) -> str:
    create = pb.CreateModelOp(
        model_seq_id=number,
        base_model=str(base),
        rank=rank,
        seed=number,
        train_mlp=True,
        train_attn=True,
    )
    promise = await api.Submit(pb.TrainingCall(session_id=session, create_model=create), Context)
    outcome = await _result(api, promise)
    assert outcome.create_model.model_id == f"{session}:train:{number}" == promise.model_id
    return promise.model_id


def _batch(loss_fn: str = "cross_entropy") -> pb.ForwardBackwardOp:
    op = pb.ForwardBackwardOp(loss_fn=loss_fn)
    for offset in range(3):
        tokens = [(offset + 5 * i) % 40 + 2 for i in range(8)]
        datum = op.data.add(tokens=tokens, target_tokens=[*tokens[1:], tokens[0]])
        datum.inputs["weights"].values.extend([1.0] * 8)
    return op


async def _loss(api: TinkerApiService, model_id: str, seq: int, *, train: bool) -> float:
    op = _batch()
    op.forward_only = not train
    call = pb.TrainingCall(model_id=model_id, seq_id=seq, forward_backward=op)
    outcome = await _result(api, await api.Submit(call, Context))
    assert len(outcome.forward_backward.logprobs) == 3
    return outcome.forward_backward.metrics["loss:sum"]


async def _step(api: TinkerApiService, model_id: str, seq: int) -> None:
    adam = pb.AdamParams(learning_rate=0.05, beta1=0.9, beta2=0.95, eps=1e-8)
    call = pb.TrainingCall(model_id=model_id, seq_id=seq, optim_step=pb.OptimStepOp(adam=adam))
    outcome = await _result(api, await api.Submit(call, Context))
    assert outcome.optim_step.metrics["grad_norm:mean"] > 0


async def _session(api: TinkerApiService) -> str:
    return (await api.CreateSession(pb.CreateTrainingSessionRequest(), Context)).session_id


async def test_a_client_trains_saves_and_lists_its_checkpoints(
    service: TinkerApiService, model_dir: Path
) -> None:
    session = await _session(service)
    model_id = await _client(service, session, 0, model_dir)
    first = await _loss(service, model_id, 1, train=True)
    await _step(service, model_id, 2)
    await _loss(service, model_id, 3, train=True)
    await _step(service, model_id, 4)
    assert await _loss(service, model_id, 5, train=False) < first
    save = pb.TrainingCall(model_id=model_id, seq_id=6, save_weights=pb.SaveWeightsOp(name="s1"))
    saved = await _result(service, await service.Submit(save, Context))
    assert saved.save.path == f"tinker://{model_id}/weights/s1"
    sampler = pb.SaveForSamplerOp(name="s1")
    call = pb.TrainingCall(model_id=model_id, seq_id=7, save_for_sampler=sampler)
    await _result(service, await service.Submit(call, Context))
    listed = await service.ListCheckpoints(
        pb.ListCheckpointsRequest(training_run_id=model_id), Context
    )
    assert [(c.checkpoint_id, c.checkpoint_type, c.step) for c in listed.checkpoints] == [
        ("weights/s1", "training", 1),
        ("sampler_weights/s1", "sampler", 1),  # unchanged weights: the same checkpoint
    ]
    info = await service.WeightsInfo(pb.WeightsInfoRequest(tinker_path=saved.save.path), Context)
    assert info.lora_rank == 4 and info.base_model == str(model_dir)
    runs = await service.ListRuns(pb.ListRunsRequest(), Context)
    assert [r.training_run_id for r in runs.runs] == [model_id] and runs.runs[0].loaded
    # the fleet's layout: the run is a model of the project "tinker"
    run_dir = Path(service.runs.model_dir(model_id))
    assert (run_dir / "checkpoints" / "0001" / "adapter_model.safetensors").is_file()


async def test_calls_run_in_seq_id_order_and_a_retry_is_the_same_call(
    service: TinkerApiService, model_dir: Path
) -> None:
    session = await _session(service)
    model_id = await _client(service, session, 0, model_dir)
    adam = pb.AdamParams(learning_rate=0.05, beta1=0.9, beta2=0.95, eps=1e-8)
    step = pb.TrainingCall(model_id=model_id, seq_id=2, optim_step=pb.OptimStepOp(adam=adam))
    later = await service.Submit(step, Context)  # waits for seq 1
    outcome = await service.Retrieve(pb.RetrieveRequest(request_id=later.request_id), Context)
    assert outcome.pending
    fb = pb.TrainingCall(model_id=model_id, seq_id=1, forward_backward=_batch())
    first = await service.Submit(fb, Context)
    assert (await service.Submit(fb, Context)).request_id == first.request_id  # a retry
    await _result(service, first)
    await _result(service, later)
    with pytest.raises(InvalidArgument, match="seq_id"):  # a number before the client's
        stale = pb.TrainingCall(model_id=model_id, seq_id=-1, forward_backward=_batch())
        await service.Submit(stale, Context)


async def test_two_clients_keep_their_own_weights(
    service: TinkerApiService, model_dir: Path
) -> None:
    session = await _session(service)
    a = await _client(service, session, 0, model_dir)
    b = await _client(service, session, 1, model_dir)
    b_before = await _loss(service, b, 1, train=False)
    a_before = await _loss(service, a, 1, train=True)
    await _step(service, a, 2)
    assert await _loss(service, a, 3, train=False) < a_before
    assert await _loss(service, b, 2, train=False) == pytest.approx(b_before, abs=1e-6)


async def _create_refused(
    api: TinkerApiService, session: str, base: Path, number: int, rank: int, match: str
) -> None:
    """A new client (model_seq_id `number`) refused with a 429 whose message matches."""
    create = pb.CreateModelOp(
        model_seq_id=number, base_model=str(base), rank=rank, train_mlp=True, train_attn=True
    )
    with pytest.raises(ResourceExhausted, match=match):
        await api.Submit(pb.TrainingCall(session_id=session, create_model=create), Context)


async def test_eight_clients_share_one_base_and_keep_their_own_weights(
    tmp_path: Path, model_dir: Path
) -> None:
    async with _started(tmp_path, tinker_api_max_clients=8) as api:
        session = await _session(api)
        clients = [
            await _client(api, session, n, model_dir, rank=4 * (1 + n % 2)) for n in range(8)
        ]
        assert _backend(api).bases.loads == 1  # one base in memory for the eight
        before = [await _loss(api, c, 1, train=False) for c in clients]
        trained = await _loss(api, clients[3], 2, train=True)
        await _step(api, clients[3], 3)
        after = [await _loss(api, c, 2 + (c == clients[3]) * 2, train=False) for c in clients]
        assert after[3] < trained
        for n in (0, 1, 2, 4, 5, 6, 7):
            assert after[n] == pytest.approx(before[n], abs=1e-6), n
        await _create_refused(api, session, model_dir, 8, 4, "ARTFLEET_TINKER_API_MAX_CLIENTS")


async def test_auto_sizes_clients_by_the_devices_free_memory(
    tmp_path: Path, model_dir: Path
) -> None:
    async with _started(tmp_path) as api:
        assert api._settings.tinker_api_max_clients == "auto"
        backend = _backend(api)
        session = await _session(api)
        assert backend.tenant_room(32)[0] == 1  # no base loaded: room for the first
        await _client(api, session, 0, model_dir)
        room, figures = backend.tenant_room(32)
        assert room > 1 and "GiB free beside one step" in figures  # this machine's memory
        backend.activation_budget_bytes = 1 << 50  # a step that would need all of it
        await _create_refused(api, session, model_dir, 1, 32, r"device's memory .*=auto")


async def test_a_refused_call_leaves_no_gap_in_the_clients_order(
    service: TinkerApiService, model_dir: Path
) -> None:
    session = await _session(service)
    model_id = await _client(service, session, 0, model_dir)
    uneven = _batch()
    del uneven.data[0].target_tokens[-1]  # lengths that differ: refused at the request
    call = pb.TrainingCall(model_id=model_id, seq_id=1, forward_backward=uneven)
    with pytest.raises(InvalidArgument, match="target_tokens has 7 positions"):
        await service.Submit(call, Context)
    # The SDK has numbered its next call 2: it runs, not waiting for seq_id 1 for ever.
    assert await _loss(service, model_id, 2, train=True) > 0
    # A call the API's front refused never reached the trainer: the front passes it over.
    passed = pb.TrainingCall(model_id=model_id, seq_id=3, pass_over=pb.PassOverOp(reason="x"))
    assert (await service.Submit(passed, Context)).request_id == ""
    await _step(service, model_id, 4)


async def test_a_token_outside_the_vocabulary_is_refused_naming_the_field(
    service: TinkerApiService, model_dir: Path
) -> None:
    session = await _session(service)
    model_id = await _client(service, session, 0, model_dir)
    for seq, field in enumerate(("model_input", "loss_fn_inputs.target_tokens"), start=1):
        op = _batch()
        tokens = op.data[1].tokens if field == "model_input" else op.data[1].target_tokens
        tokens[2] = 10**9
        call = pb.TrainingCall(model_id=model_id, seq_id=seq, forward_backward=op)
        with pytest.raises(InvalidArgument, match="outside the model's vocabulary") as refused:
            await service.Submit(call, Context)
        assert refused.value.field == f"data[1].{field}"
    assert await _loss(service, model_id, 3, train=False) > 0  # the next call runs


async def test_limits_and_refusals_name_what_they_refuse(
    service: TinkerApiService, model_dir: Path
) -> None:
    session = await _session(service)
    await _client(service, session, 0, model_dir)
    await _client(service, session, 1, model_dir)
    create = pb.CreateModelOp(
        model_seq_id=2, base_model=str(model_dir), rank=4, train_mlp=True, train_attn=True
    )
    with pytest.raises(ResourceExhausted, match="ARTFLEET_TINKER_API_MAX_CLIENTS"):
        await service.Submit(pb.TrainingCall(session_id=session, create_model=create), Context)
    with pytest.raises(NotFound, match="not loaded"):
        call = pb.TrainingCall(model_id=f"{session}:train:9", seq_id=1, forward_backward=_batch())
        await service.Submit(call, Context)
    with pytest.raises(InvalidArgument, match="loss_fn"):
        call = pb.TrainingCall(
            model_id=f"{session}:train:0", seq_id=1, forward_backward=_batch("dro")
        )
        await service.Submit(call, Context)
    with pytest.raises(InvalidArgument, match="base_model"):
        create = pb.CreateModelOp(
            model_seq_id=3, base_model="no/such-model", rank=4, train_mlp=True, train_attn=True
        )
        await service.Submit(pb.TrainingCall(session_id=session, create_model=create), Context)
    with pytest.raises(InvalidArgument, match="train_attn"):
        create = pb.CreateModelOp(model_seq_id=3, base_model=str(model_dir), rank=4, train_mlp=True)
        await service.Submit(pb.TrainingCall(session_id=session, create_model=create), Context)


async def test_an_ended_session_releases_its_clients_and_keeps_their_weights(
    service: TinkerApiService, model_dir: Path
) -> None:
    session = await _session(service)
    model_id = await _client(service, session, 0, model_dir)
    save = pb.TrainingCall(model_id=model_id, seq_id=1, save_weights=pb.SaveWeightsOp(name="kept"))
    await _result(service, await service.Submit(save, Context))
    await service.FinishSession(pb.FinishSessionRequest(session_id=session), Context)
    with pytest.raises(NotFound):
        await service.GetInfo(pb.GetInfoRequest(model_id=model_id), Context)
    run = await service.GetRun(pb.GetRunRequest(training_run_id=model_id), Context)
    assert not run.loaded and run.last_checkpoint.checkpoint_id == "weights/kept"
    # a new session goes on from the saved weights (the SDK's create-from-state)
    again = await _session(service)
    load = pb.LoadWeightsOp(
        path=f"tinker://{model_id}/weights/kept", optimizer=True, model_seq_id=0
    )
    promise = await service.Submit(pb.TrainingCall(session_id=again, load_weights=load), Context)
    outcome = await _result(service, promise)
    assert outcome.load.model_id == f"{again}:train:0"


async def test_a_future_from_before_a_restart_fails_retryably() -> None:
    before, after = Futures(8), Futures(8)
    request_id = before.new()
    outcome = await after.wait(request_id, 0)
    assert outcome.failure.retryable and "restarted" in outcome.failure.message
    waiting = after.new()
    after.fail_all("stopping")
    assert (await after.wait(waiting, 0)).failure.retryable
    with pytest.raises(NotFound):
        await after.wait(f"{after.boot}.999", 0)


async def test_ephemeral_sampler_saves_are_pruned_and_named_saves_kept(
    service: TinkerApiService, model_dir: Path
) -> None:
    """An RL loop saves for sampling every step: the run keeps its named saves, what a
    live sampling session samples and the latest checkpoints, not every step."""
    session = await _session(service)
    model_id = await _client(service, session, 0, model_dir)
    seq = 0
    for step in range(5):
        await _loss(service, model_id, seq := seq + 1, train=True)
        await _step(service, model_id, seq := seq + 1)
        if step == 1:
            named = pb.SaveWeightsOp(name="keep-me")
            call = pb.TrainingCall(model_id=model_id, seq_id=(seq := seq + 1), save_weights=named)
            await _result(service, await service.Submit(call, Context))
        ephemeral = pb.SaveForSamplerOp(sampling_session_seq_id=step)
        call = pb.TrainingCall(
            model_id=model_id, seq_id=(seq := seq + 1), save_for_sampler=ephemeral
        )
        await _result(service, await service.Submit(call, Context))
        # a finished sampling client: only the newest sampler stays in the session
        live = service.sessions.get(session).samplers
        for old in [k for k in live if not k.endswith(f":sample:{step}")]:
            del live[old]
    steps = service.runs.steps_on_disk(model_id)
    assert steps == [2, 4, 5]  # the named save, the last two
    run = await service.GetRun(pb.GetRunRequest(training_run_id=model_id), Context)
    assert run.last_checkpoint.checkpoint_id == "weights/keep-me" and run.last_checkpoint.step == 2


async def test_a_session_that_stops_heartbeating_has_its_clients_released(
    service: TinkerApiService, model_dir: Path
) -> None:
    session = await _session(service)
    model_id = await _client(service, session, 0, model_dir)
    save = pb.TrainingCall(model_id=model_id, seq_id=1, save_weights=pb.SaveWeightsOp(name="s"))
    await _result(service, await service.Submit(save, Context))
    service.sessions.idle_s = 0.0  # every session is silent for too long from now
    await service._release_ended()
    with pytest.raises(NotFound):
        await service.GetInfo(pb.GetInfoRequest(model_id=model_id), Context)
    with pytest.raises(FailedPrecondition):  # the SDK stops heartbeating on this (410)
        await service.Heartbeat(pb.SessionHeartbeatRequest(session_id=session), Context)
    assert service.runs.steps_on_disk(model_id) == [1]  # its saved weights stay


async def test_a_client_writes_no_checkpoint_before_its_first_save(
    service: TinkerApiService, model_dir: Path
) -> None:
    session = await _session(service)
    model_id = await _client(service, session, 0, model_dir)
    await _loss(service, model_id, 1, train=True)
    await _step(service, model_id, 2)
    assert service.runs.steps_on_disk(model_id) == []  # no step 0 of an untrained LoRA
    save = pb.TrainingCall(model_id=model_id, seq_id=3, save_weights=pb.SaveWeightsOp(name="a"))
    assert (await _result(service, await service.Submit(save, Context))).save.path
    assert service.runs.steps_on_disk(model_id) == [1]
    listed = await service.ListCheckpoints(
        pb.ListCheckpointsRequest(training_run_id=model_id), Context
    )
    assert [(c.checkpoint_id, c.step) for c in listed.checkpoints] == [("weights/a", 1)]


ENGINE_CONTEXT = 16


@asynccontextmanager
async def _on_vllm(tmp_path: Path, model_dir: Path) -> AsyncIterator[TinkerApiService]:
    """The service as on the vLLM engine: the inference service lists `model_dir` as its
    base with a max_model_len below the model's 8192 positions."""

    async def listing() -> dict[str, Any]:
        return {"data": [{"id": str(model_dir), "max_model_len": ENGINE_CONTEXT}]}

    trainer = TrainerSettings(art_path=str(tmp_path / "art"), api_token=SecretStr("t"))
    backend = TorchBackend(path=trainer.art_path, num_threads=1, train_num_threads=1)
    sampler = CompletionsSampler(backend.sampling_endpoint)
    api = TinkerApiService(trainer, backend.training_clients, sampler, BaseModels(trainer, listing))
    try:
        yield api
    finally:
        await api.stop()
        await backend.close()


async def test_training_and_sampling_take_the_engines_context(
    tmp_path: Path, model_dir: Path
) -> None:
    async with _on_vllm(tmp_path, model_dir) as api:
        capabilities = await api.Capabilities(pb.CapabilitiesRequest(), Context)
        contexts = {m.model_name: m.max_context_length for m in capabilities.models}
        assert contexts[str(model_dir)] == ENGINE_CONTEXT
        session = await _session(api)
        model_id = await _client(api, session, 0, model_dir)
        long = pb.ForwardBackwardOp(loss_fn="cross_entropy")
        tokens = [2 + i for i in range(ENGINE_CONTEXT + 1)]
        datum = long.data.add(tokens=tokens, target_tokens=tokens)
        datum.inputs["weights"].values.extend([1.0] * len(tokens))
        call = pb.TrainingCall(model_id=model_id, seq_id=1, forward_backward=long)
        with pytest.raises(InvalidArgument, match=r"data\[0\].*context is 16"):
            await api.Submit(call, Context)
        assert await _loss(api, model_id, 2, train=True) > 0  # 8 tokens fit
        request = pb.CreateSamplingSessionRequest(session_id=session, base_model=str(model_dir))
        sampler = await api.CreateSamplingSession(request, Context)
        sample = pb.SampleOp(
            sampling_session_id=sampler.sampling_session_id, prompt=tokens[:10], num_samples=1
        )
        sample.params.max_tokens = 7
        with pytest.raises(InvalidArgument, match=r"sampling_params.max_tokens.*at most 6"):
            await api.Submit(pb.TrainingCall(sample=sample), Context)
