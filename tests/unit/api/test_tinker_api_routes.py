"""The Tinker-compatible API before a fake trainer: each route's body as
its clients send it becomes the TinkerApi call, and each answer has the shape the
clients' strict response models require (written out here as they define it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
from tinker_api_fake import BASE_MODEL, Front, tinker_api_front

from artfleet.v1 import tinker_api_pb2 as pb

API = "/api/v1"


@pytest.fixture
async def front() -> AsyncIterator[Front]:
    async with tinker_api_front() as front:
        yield front


async def _post(front: Front, route: str, body: dict[str, Any], status: int = 200) -> Any:
    response = await front.client.post(f"{API}/{route}", json=body)
    assert response.status_code == status, response.text
    return response.json()


async def test_client_config_turns_the_optional_features_off(front: Front) -> None:
    config = await _post(front, "client/config", {"sdk_version": "0.38.0"})
    assert config == {
        "pjwt_auth_enabled": False,
        "use_pyqwest_transport": False,
        "proto_compress_fwdbwd": False,
        "parallel_fwdbwd_chunks": False,
        "sample_use_retrieve_futures": False,
        "custom_loss_server_side": False,
        "sample_join_sampling_session": False,
    }
    assert await _post(front, "client/dynamic_config", {"sdk_version": "0.38.0"}) == {}
    assert (await front.client.get(f"{API}/healthz")).json() == {"status": "ok"}
    telemetry = {"events": [], "platform": "linux", "sdk_version": "0.38.0", "session_id": "S"}
    assert await _post(front, "telemetry", telemetry) == {"status": "accepted"}


async def test_a_session_is_created_kept_and_finished(front: Front) -> None:
    body = {"tags": ["a"], "user_metadata": {"n": 1, "s": "x"}, "sdk_version": "0.38.0"}
    created = await _post(front, "create_session", {**body, "type": "create_session"})
    assert created == {"type": "create_session", "session_id": "S"}
    sent = front.trainer.last("CreateSession")
    assert (list(sent.tags), dict(sent.user_metadata)) == (["a"], {"n": "1", "s": "x"})
    beat = {"session_id": "S", "type": "session_heartbeat"}
    assert await _post(front, "session_heartbeat", beat) == {"type": "session_heartbeat"}
    finish = {"reason": {"type": "errored"}, "detail": None}
    assert await _post(front, "sessions/S/finish", finish) == {}
    assert front.trainer.last("FinishSession") == pb.FinishSessionRequest(
        session_id="S", reason="errored"
    )
    # The fleet token travels to the trainer on the API's own channel.
    assert {m["authorization"] for m in front.trainer.metadata} == {
        f"Bearer {front.settings.api_token.get_secret_value()}"
    }


async def test_create_model_queues_a_lora_and_answers_its_future(front: Front) -> None:
    body = {
        "session_id": "S",
        "model_seq_id": 0,
        "base_model": BASE_MODEL,
        "lora_config": {"rank": 8, "train_unembed": False, "train_mlp": True, "train_attn": True},
        "optimizer_config": {"type": "adamw"},
        "type": "create_model",
    }
    assert await _post(front, "create_model", body) == {"request_id": "R1", "model_id": "S:train:0"}
    call = front.trainer.last("Submit")
    assert call.session_id == "S" and call.WhichOneof("op") == "create_model"
    op = call.create_model
    assert (op.model_seq_id, op.base_model, op.rank) == (0, BASE_MODEL, 8)
    assert (op.train_unembed, op.train_mlp, op.train_attn) == (False, True, True)
    assert not op.HasField("seed")
    dimuon = {**body, "optimizer_config": {"type": "dimuon", "version": 1}}
    refused = await _post(front, "create_model", dimuon, 400)
    assert "optimizer_config.type" in refused["detail"] and "dimuon" in refused["detail"]
    no_lora = {k: v for k, v in body.items() if k != "lora_config"}
    assert "lora_config" in (await _post(front, "create_model", no_lora, 400))["detail"]


async def test_get_info_names_the_model_and_its_tokenizer(front: Front) -> None:
    info = await _post(front, "get_info", {"model_id": "S:train:0", "type": "get_info"})
    assert info == {
        "type": "get_info",
        "model_id": "S:train:0",
        "model_data": {"arch": "llama", "model_name": BASE_MODEL, "tokenizer_id": BASE_MODEL},
        "model_name": BASE_MODEL,
        "is_lora": True,
        "lora_rank": 8,
        "optimizer_config": {"type": "adamw"},
    }


ADAM = {"learning_rate": 1e-5, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8}


@pytest.mark.parametrize("key", ["adam_params", "optimizer_params", "optim_params"])
async def test_optim_step_takes_adam_under_each_name(front: Front, key: str) -> None:
    body = {"model_id": "S:train:0", "seq_id": 2, "type": "optim_step", key: ADAM}
    assert (await _post(front, "optim_step", body))["request_id"] == "R1"
    call = front.trainer.last("Submit")
    assert (call.model_id, call.seq_id) == ("S:train:0", 2)
    adam = call.optim_step.adam
    assert (adam.learning_rate, adam.eps, adam.weight_decay) == (1e-5, 1e-8, 0.0)


async def test_optim_step_refuses_another_optimizer_by_name(front: Front) -> None:
    dimuon = {"type": "dimuon", "learning_rate": 0.001, "grad_clip_norm": 0.0, "beta1": 0.9}
    body = {"model_id": "m", "seq_id": 2, "optimizer_params": dimuon}
    assert "'dimuon' is not served" in (await _post(front, "optim_step", body, 400))["detail"]
    # Nothing to run; the trainer passes over the client's seq_id 2 (its next call is 3).
    passed = front.trainer.last("Submit")
    assert (passed.WhichOneof("op"), passed.model_id, passed.seq_id) == ("pass_over", "m", 2)
    assert len(front.trainer.requests) == 1


async def test_saves_named_and_ephemeral(front: Front) -> None:
    body = {"model_id": "m", "path": "step_1", "seq_id": 3, "overwrite": True}
    await _post(front, "save_weights", {**body, "type": "save_weights"})
    op = front.trainer.last("Submit").save_weights
    assert (op.name, op.overwrite) == ("step_1", True)
    named = {"model_id": "m", "path": "n", "kind": "snapshot", "seq_id": 4}
    await _post(front, "save_weights_for_sampler", named)
    op = front.trainer.last("Submit").save_for_sampler
    assert op.name == "n" and not op.HasField("sampling_session_seq_id")
    ephemeral = {"model_id": "m", "sampling_session_seq_id": 1, "kind": "snapshot", "seq_id": 5}
    await _post(front, "save_weights_for_sampler", ephemeral)
    op = front.trainer.last("Submit").save_for_sampler
    assert (op.name, op.sampling_session_seq_id) == ("", 1)
    inflight = await _post(front, "save_weights_for_sampler", {**named, "kind": "inflight"}, 400)
    assert inflight["detail"].startswith("kind:")
    slashed = await _post(front, "save_weights", {**body, "path": "a/b"}, 400)
    assert slashed["detail"].startswith("path:")


async def test_load_onto_a_model_and_load_that_creates_one(front: Front) -> None:
    path = "tinker://S:train:0/weights/step_3"
    legacy = {"model_id": "S:train:0", "seq_id": 1, "path": path, "optimizer": True}
    assert await _post(front, "load_weights", legacy) == {
        "request_id": "R1",
        "model_id": "S:train:0",
    }
    call = front.trainer.last("Submit")
    assert (call.model_id, call.seq_id, call.load_weights.optimizer) == ("S:train:0", 1, True)
    assert not call.load_weights.HasField("model_seq_id")
    creating = {"session_id": "S", "model_seq_id": 1, "path": path, "optimizer": False}
    promise = await _post(front, "load_weights", {**creating, "type": "load_weights"})
    assert promise == {"request_id": "R2", "model_id": "S:train:1"}
    call = front.trainer.last("Submit")
    assert (call.session_id, call.model_id, call.load_weights.model_seq_id) == ("S", "", 1)
    both = await _post(front, "load_weights", {**legacy, **creating}, 400)
    assert "either model_id with seq_id, or session_id with model_seq_id" in both["detail"]
    front.trainer.promised_model_id = "S:train:9"  # the client would train the wrong model
    wrong = await _post(front, "load_weights", creating, 502)
    assert "'S:train:9'" in wrong["detail"]


async def test_sampling_session_and_sampler(front: Front) -> None:
    path = "tinker://S:train:0/sampler_weights/n"
    body = {"session_id": "S", "sampling_session_seq_id": 0, "model_path": path}
    created = await _post(front, "create_sampling_session", body)
    assert created == {"type": "create_sampling_session", "sampling_session_id": "S:sample:0"}
    sampler = (await front.client.get(f"{API}/samplers/S:sample:0")).json()
    assert sampler == {"sampler_id": "S:sample:0", "base_model": BASE_MODEL, "model_path": None}


def _sample(**extra: Any) -> dict[str, Any]:
    return {
        "num_samples": 2,
        "prompt": {"chunks": [{"tokens": [1, 2], "type": "encoded_text"}]},
        "sampling_params": {"max_tokens": 8, "stop": [2], "temperature": 1.0, "top_k": -1},
        "sampling_session_id": "S:sample:0",
        "seq_id": 0,
        "prompt_logprobs": False,
        "topk_prompt_logprobs": 0,
        "topk_sample_logprobs": 0,
        "prompt_alt_tokens_k": 0,
        "record_stability_info": False,
        "type": "sample",
        **extra,
    }


async def test_asample_promises_one_sequence_id_per_sample(front: Front) -> None:
    promise = await _post(front, "asample", _sample())
    assert promise == {"request_id": "R1", "sample_sequence_ids": ["R1:0", "R1:1"]}
    op = front.trainer.last("Submit").sample
    assert (op.sampling_session_id, list(op.prompt), op.num_samples) == ("S:sample:0", [1, 2], 2)
    assert (op.params.max_tokens, list(op.params.stop_tokens), op.params.stop_set) == (8, [2], True)
    strings = _sample(sampling_params={"stop": ["\n\nUser:"]})
    await _post(front, "asample", strings)
    assert list(front.trainer.last("Submit").sample.params.stop_strings) == ["\n\nUser:"]
    await _post(front, "asample", _sample(sampling_params={}))
    params = front.trainer.last("Submit").sample.params
    assert (params.stop_set, params.max_tokens, params.top_k) == (False, 0, -1)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"prompt": {"chunks": [{"data": "aGk=", "format": "png", "type": "image"}]}}, "prompt:"),
        ({"topk_prompt_logprobs": 5}, "topk_prompt_logprobs:"),
        ({"prompt_alt_tokens_k": 2}, "prompt_alt_tokens_k:"),
        ({"record_stability_info": True}, "record_stability_info:"),
        ({"sampling_session_id": None}, "sampling_session_id:"),
        ({"sampling_params": {"max_tokens": 0}}, "sampling_params.max_tokens:"),
        ({"sampling_params": {"max_tokens": -3}}, "sampling_params.max_tokens:"),
    ],
)
async def test_asample_refuses_what_it_cannot_serve(
    front: Front, extra: dict[str, Any], named: str
) -> None:
    refused = await _post(front, "asample", _sample(**extra), 400)
    assert refused["detail"].startswith(named), refused
    assert not front.trainer.requests


async def test_runs_checkpoints_and_weights(front: Front) -> None:
    runs = (await front.client.get(f"{API}/training_runs?limit=5&offset=10")).json()
    assert runs["cursor"] == {"offset": 10, "limit": 5, "total_count": 7}
    assert front.trainer.last("ListRuns") == pb.ListRunsRequest(limit=5, offset=10)
    run = (await front.client.get(f"{API}/training_runs/S:train:0")).json()
    assert runs["training_runs"] == [run]
    checkpoint = {
        "checkpoint_id": "weights/step_3",
        "checkpoint_type": "training",
        "time": "2023-11-14T22:13:20+00:00",
        "tinker_path": "tinker://S:train:0/weights/step_3",
        "size_bytes": 1234,
        "public": False,
    }
    assert run == {
        "training_run_id": "S:train:0",
        "base_model": BASE_MODEL,
        "model_owner": "artfleet",
        "is_lora": True,
        "corrupted": False,
        "lora_rank": 8,
        "last_request_time": "2023-11-14T22:15:00+00:00",
        "last_checkpoint": checkpoint,
        "last_sampler_checkpoint": None,
        "user_metadata": {"owner": "unit"},
    }
    assert datetime.fromisoformat(run["last_request_time"]).tzinfo is not None
    listed = (await front.client.get(f"{API}/training_runs/S:train:0/checkpoints")).json()
    assert listed["cursor"] is None and listed["checkpoints"][0] == checkpoint
    assert listed["checkpoints"][1]["checkpoint_type"] == "sampler"
    info = await _post(front, "weights_info", {"tinker_path": checkpoint["tinker_path"]})
    assert info == {
        "base_model": BASE_MODEL,
        "is_lora": True,
        "lora_rank": 8,
        "train_unembed": False,
        "train_mlp": True,
        "train_attn": True,
        "optimizer_config": {"type": "adamw"},
    }
    capabilities = (await front.client.get(f"{API}/get_server_capabilities")).json()
    assert capabilities == {
        "supported_models": [
            {
                "model_name": BASE_MODEL,
                "max_context_length": 2048,
                "trainable": True,
                "sampleable": True,
            }
        ]
    }


async def test_a_checkpoint_id_with_its_slash_is_deleted(front: Front) -> None:
    deleted = await front.client.delete(f"{API}/training_runs/S:train:0/checkpoints/weights/s_1")
    assert deleted.status_code == 200, deleted.text
    assert front.trainer.last("DeleteCheckpoint") == pb.DeleteCheckpointRequest(
        training_run_id="S:train:0", checkpoint_id="weights/s_1"
    )
    # A checkpoint named like a route's last segment is still a checkpoint.
    await front.client.delete(f"{API}/training_runs/S:train:0/checkpoints/weights/publish")
    assert front.trainer.last("DeleteCheckpoint").checkpoint_id == "weights/publish"
