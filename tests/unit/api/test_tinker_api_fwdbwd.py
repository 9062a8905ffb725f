"""forward_backward under the Tinker-compatible API: the protobuf body
of newer clients (built here with our TinkerWire messages, which carry Tinker's field
numbers) and the JSON body of older ones become the same trainer call; what a text-only
trainer cannot take is refused by datum and key."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from tinker_api_fake import Front, tinker_api_front

from artfleet.v1 import tinker_wire_pb2 as wire

API = "/api/v1"
PROTOBUF = {"Content-Type": "application/x-protobuf"}


@pytest.fixture
async def front() -> AsyncIterator[Front]:
    async with tinker_api_front() as front:
        yield front


def _tensor(values: list[float], dtype: str = "float32") -> wire.TinkerWireTensor:
    if dtype == "int64":
        array = np.asarray(values, dtype="<i8")
        code = wire.TINKER_WIRE_DTYPE_INT64
    else:
        array = np.asarray(values, dtype="<f4")
        code = wire.TINKER_WIRE_DTYPE_FLOAT32
    return wire.TinkerWireTensor(dense=array.tobytes(), dtype=code, shape=[len(values)])


def _datum(tokens: list[int], **inputs: wire.TinkerWireTensor) -> wire.TinkerWireDatum:
    datum = wire.TinkerWireDatum()
    datum.model_input.add().encoded_text.tokens = np.asarray(tokens, "<i4").tobytes()
    for key, tensor in inputs.items():
        datum.loss_fn_inputs[key].CopyFrom(tensor)
    return datum


def _request(*data: wire.TinkerWireDatum, **extra: Any) -> wire.TinkerWireForwardBackwardRequest:
    request = wire.TinkerWireForwardBackwardRequest(
        model_id="S:train:0", seq_id=3, loss_fn="cross_entropy", **extra
    )
    request.data.extend(data)
    return request


async def _send(front: Front, request: wire.TinkerWireForwardBackwardRequest) -> Any:
    body = request.SerializeToString()
    return await front.client.post(f"{API}/forward_backward", content=body, headers=PROTOBUF)


async def test_a_protobuf_body_becomes_the_trainer_call(front: Front) -> None:
    sparse = wire.TinkerWireTensor(dtype=wire.TINKER_WIRE_DTYPE_FLOAT32, shape=[3, 2])
    sparse.sparse_csr.values = np.asarray([0.5, -1.0], "<f4").tobytes()
    sparse.sparse_csr.crow_indices = np.asarray([0, 1, 1, 2], "<i8").tobytes()
    sparse.sparse_csr.col_indices = np.asarray([1, 0], "<i8").tobytes()
    first = _datum([5, 6, 7], target_tokens=_tensor([6, 7, 8], "int64"), weights=_tensor([0, 1, 1]))
    first.model_input.add().encoded_text.tokens = b""  # an empty chunk adds nothing
    second = _datum([9, 10, 11], target_tokens=_tensor([10, 11, 12], "int64"), advantages=sparse)
    request = _request(first, second, forward_only=True)
    request.loss_fn_config["clip_low_threshold"] = 0.5  # written to both maps: v2 wins
    request.loss_fn_config_v2["clip_low_threshold"].number = 0.8
    response = await _send(front, request)
    assert response.status_code == 200, response.text
    assert response.json() == {"request_id": "R1", "model_id": "S:train:0"}
    call = front.trainer.last("Submit")
    assert (call.model_id, call.seq_id) == ("S:train:0", 3)
    op = call.forward_backward
    assert (op.loss_fn, op.forward_only, dict(op.loss_fn_config)) == (
        "cross_entropy",
        True,
        {"clip_low_threshold": 0.8},
    )
    one, two = op.data
    assert (list(one.tokens), list(one.target_tokens)) == ([5, 6, 7], [6, 7, 8])
    assert (list(one.inputs["weights"].values), list(one.inputs["weights"].shape)) == (
        [0, 1, 1],
        [3],
    )
    advantages = two.inputs["advantages"]
    assert list(advantages.shape) == [3, 2]
    assert list(advantages.values) == [0, 0.5, 0, 0, -1, 0]


async def test_the_legacy_config_map_serves_when_v2_is_absent(front: Front) -> None:
    request = _request(_datum([1], target_tokens=_tensor([2], "int64")))
    request.loss_fn_config["beta"] = 0.1
    assert (await _send(front, request)).status_code == 200
    assert dict(front.trainer.last("Submit").forward_backward.loss_fn_config) == {
        "beta": pytest.approx(0.1)
    }


def _json_datum(tokens: list[int], **inputs: dict[str, Any]) -> dict[str, Any]:
    return {
        "loss_fn_inputs": inputs,
        "model_input": {"chunks": [{"tokens": tokens, "type": "encoded_text"}]},
    }


def _json_body(*data: dict[str, Any], key: str = "forward_backward_input") -> dict[str, Any]:
    return {"model_id": "S:train:0", "seq_id": 1, key: {"data": data, "loss_fn": "cispo"}}


async def test_the_json_bodies_of_older_clients(front: Front) -> None:
    weights = {
        "data": [1.0, 2.0],
        "dtype": "float32",
        "shape": [2, 2],
        "sparse_crow_indices": [0, 1, 2],
        "sparse_col_indices": [1, 0],
    }
    datum = _json_datum(
        [1, 2], target_tokens={"data": [2, 3], "dtype": "int64", "shape": [2]}, weights=weights
    )
    response = await front.client.post(f"{API}/forward_backward", json=_json_body(datum))
    assert response.status_code == 200, response.text
    op = front.trainer.last("Submit").forward_backward
    assert (op.loss_fn, op.forward_only, list(op.data[0].target_tokens)) == ("cispo", False, [2, 3])
    assert list(op.data[0].inputs["weights"].values) == [0, 1, 2, 0]
    forward = _json_body(datum, key="forward_input")
    response = await front.client.post(f"{API}/forward", json=forward)
    assert response.status_code == 200, response.text
    assert front.trainer.last("Submit").forward_backward.forward_only


async def _refused(front: Front, request: wire.TinkerWireForwardBackwardRequest) -> str:
    response = await _send(front, request)
    assert response.status_code == 400, response.text
    # Nothing to run: the trainer only passes over the call's seq_id in the client's order.
    calls = [(c.WhichOneof("op"), c.model_id, c.seq_id) for _, c in front.trainer.requests]
    assert calls == [("pass_over", request.model_id, request.seq_id)], calls
    front.trainer.requests.clear()
    detail: str = response.json()["detail"]
    return detail


async def test_nan_is_refused_naming_the_datum_and_key(front: Front) -> None:
    good = _datum([1, 2], weights=_tensor([1, 1]))
    bad = _datum([1, 2], weights=_tensor([1, math.nan]))
    detail = await _refused(front, _request(good, bad))
    assert detail.startswith("data[1].loss_fn_inputs.weights:") and "NaN" in detail
    inf = _datum([1, 2], advantages=_tensor([math.inf, 0]))
    assert (await _refused(front, _request(inf))).startswith("data[0].loss_fn_inputs.advantages")
    # The JSON reader takes NaN (older clients may write it): refused by name all the same.
    raw = b'{"model_id": "m", "seq_id": 1, "forward_backward_input": {"loss_fn": "ppo", "data": '
    raw += b'[{"model_input": {"chunks": [{"type": "encoded_text", "tokens": [1]}]}, '
    raw += b'"loss_fn_inputs": {"logprobs": {"data": [NaN], "dtype": "float32"}}}]}}'
    response = await front.client.post(
        f"{API}/forward_backward", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["detail"].startswith("data[0].loss_fn_inputs.logprobs:")


async def test_a_length_mismatch_is_refused_naming_the_datum(front: Front) -> None:
    short = _datum([1, 2, 3], target_tokens=_tensor([2, 3], "int64"))
    detail = await _refused(front, _request(_datum([1], weights=_tensor([1])), short))
    assert detail.startswith("data[1]:") and "2 positions" in detail and "has 3" in detail


async def test_image_and_audio_chunks_are_refused(front: Front) -> None:
    image = _datum([1])
    image.model_input.add().image.data = b"\x89PNG"
    assert (await _refused(front, _request(image))).startswith(
        "data[0].model_input: chunk type 'image'"
    )
    audio = _datum([1])
    audio.model_input.add().dmel.dmel = b"x"
    assert "text only" in await _refused(front, _request(_datum([1]), audio))
    png = {"data": "aGk=", "format": "png", "type": "image"}
    body = _json_body(
        {"loss_fn_inputs": {}, "model_input": {"chunks": [png]}}, key="forward_backward_input"
    )
    response = await front.client.post(f"{API}/forward_backward", json=body)
    assert response.status_code == 400
    assert response.json()["detail"].startswith("data[0].model_input: chunk type 'image'")


async def test_bad_bodies_are_refused_with_a_reason(front: Front) -> None:
    text = _request(_datum([1]))
    text.loss_fn_config_v2["mode"].text = "fast"
    assert (await _refused(front, text)).startswith("loss_fn_config.mode: a string")
    int32 = wire.TinkerWireTensor(dense=b"\0" * 4, dtype=wire.TINKER_WIRE_DTYPE_INT32, shape=[1])
    assert "dtype int32 is not served" in await _refused(front, _request(_datum([1], w=int32)))
    ragged = wire.TinkerWireTensor(dense=b"\0" * 5, dtype=wire.TINKER_WIRE_DTYPE_FLOAT32)
    assert "5 bytes" in await _refused(front, _request(_datum([1], w=ragged)))
    targets = _datum([1], target_tokens=_tensor([2.0]))
    assert "int64" in await _refused(front, _request(targets))
    garbage = await front.client.post(f"{API}/forward_backward", content=b"\xff", headers=PROTOBUF)
    assert garbage.status_code == 400 and garbage.json()["detail"].startswith("body:")
    json_garbage = await front.client.post(f"{API}/forward_backward", content=b"{")
    assert json_garbage.status_code == 400 and json_garbage.json()["detail"].startswith("body:")


async def test_a_compressed_body_is_415(front: Front) -> None:
    headers = {**PROTOBUF, "Content-Encoding": "zstd"}
    response = await front.client.post(f"{API}/forward_backward", content=b"x", headers=headers)
    assert response.status_code == 415
    assert "zstd" in response.json()["detail"]
