"""retrieve_future under the Tinker-compatible API: a pending future is
`try_again`, a lost one 410, a failed one a 200 with `error`; results as JSON, and the
forward/backward and sample results as protobuf when Accept asks for it (read back here
with our TinkerWire messages, which carry Tinker's field numbers)."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from tinker_api_fake import Front, tinker_api_front

from artfleet.v1 import tinker_api_pb2 as pb
from artfleet.v1 import tinker_wire_pb2 as wire

RETRIEVE = "/api/v1/retrieve_future"
PROTOBUF = "application/x-protobuf"


@pytest.fixture
async def front() -> AsyncIterator[Front]:
    async with tinker_api_front(tinker_api_wait_s=0.25, rpc_timeout_s=0.5) as front:
        yield front


async def _retrieve(front: Front, outcome: pb.RetrieveResponse | None, accept: str = "") -> Any:
    if outcome is not None:
        front.trainer.outcomes["R"] = outcome
    headers = {"Accept": accept} if accept else {}
    body = {"request_id": "R", "allow_metadata_only": True}
    return await front.client.post(RETRIEVE, json=body, headers=headers)


async def test_a_pending_future_is_try_again_after_the_trainer_held_it(front: Front) -> None:
    response = await _retrieve(front, None, PROTOBUF)
    assert response.status_code == 200
    assert response.json() == {"type": "try_again", "request_id": "R", "queue_state": "active"}
    assert front.trainer.last("Retrieve") == pb.RetrieveRequest(request_id="R", wait_s=0.25)


async def test_a_poll_while_the_trainer_is_down_waits_for_it(front: Front) -> None:
    """Not a 503 at once: clients poll again at once after a 5xx, in a tight loop."""
    await front.server.stop(None)
    started = time.monotonic()
    response = await _retrieve(front, None)
    assert response.status_code == 504 and response.json()["detail"]
    assert time.monotonic() - started >= 0.25 + 0.5  # wait_s and the deadline's margin
    # Calls that are not polls answer at once: their clients back off themselves.
    info = await front.client.post("/api/v1/get_info", json={"model_id": "m"})
    assert info.status_code == 503


async def test_a_lost_request_is_410_and_a_failed_one_names_its_category(front: Front) -> None:
    lost = pb.Failure(message="trainer restarted", category="server", retryable=True)
    response = await _retrieve(front, pb.RetrieveResponse(failure=lost))
    assert response.status_code == 410
    assert response.json()["detail"] == "trainer restarted"
    failed = pb.Failure(message="context too long", category="user")
    response = await _retrieve(front, pb.RetrieveResponse(failure=failed))
    assert response.status_code == 200
    assert response.json() == {"error": "context too long", "category": "user"}
    odd = pb.Failure(message="x", category="cosmic")
    assert (await _retrieve(front, pb.RetrieveResponse(failure=odd))).json()[
        "category"
    ] == "unknown"


@pytest.mark.parametrize(
    ("outcome", "body"),
    [
        (
            pb.RetrieveResponse(create_model=pb.CreateModelResult(model_id="S:train:0")),
            {"model_id": "S:train:0", "type": "create_model"},
        ),
        (
            pb.RetrieveResponse(optim_step=pb.OptimStepResult(metrics={"grad_norm:mean": 0.5})),
            {"metrics": {"grad_norm:mean": 0.5}},
        ),
        (
            pb.RetrieveResponse(save=pb.SaveResult(path="tinker://S:train:0/weights/n")),
            {"path": "tinker://S:train:0/weights/n"},
        ),
        (
            pb.RetrieveResponse(save=pb.SaveResult(sampling_session_id="S:sample:1")),
            {"sampling_session_id": "S:sample:1"},
        ),
        (
            pb.RetrieveResponse(load=pb.LoadResult(model_id="S:train:1")),
            {"model_id": "S:train:1", "type": "load_weights"},
        ),
    ],
)
async def test_other_results_are_json_whatever_accept_says(
    front: Front, outcome: pb.RetrieveResponse, body: dict[str, Any]
) -> None:
    for accept in ("", PROTOBUF):
        response = await _retrieve(front, outcome, accept)
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        assert response.json() == body


FWDBWD = pb.ForwardBackwardResult(
    logprobs=[pb.FloatArray(values=[-1.0, -2.0]), pb.FloatArray(values=[-0.5])],
    metrics={"loss:sum": 3.5},
)


async def test_a_forward_backward_result_as_protobuf(front: Front) -> None:
    response = await _retrieve(front, pb.RetrieveResponse(forward_backward=FWDBWD), PROTOBUF)
    assert response.headers["content-type"] == PROTOBUF
    output = wire.TinkerWireForwardBackwardOutput.FromString(response.content)
    assert (output.loss_fn_output_type, dict(output.metrics)) == ("ArrayRecord", {"loss:sum": 3.5})
    (record,) = output.loss_fn_outputs
    batched = record.fields["logprobs"]
    assert (record.num_datums, batched.dtype) == (2, wire.TINKER_WIRE_DTYPE_FLOAT32)
    assert list(batched.trailing_shape) == []
    assert np.frombuffer(batched.offsets, "<i8").tolist() == [0, 8, 12]  # bytes
    assert np.frombuffer(batched.data, "<f4").tolist() == [-1.0, -2.0, -0.5]


async def test_datums_of_another_trailing_shape_get_their_own_record(front: Front) -> None:
    result = pb.ForwardBackwardResult(
        logprobs=[pb.FloatArray(values=[1, 2]), pb.FloatArray(values=[1, 2, 3, 4], shape=[2, 2])]
    )
    response = await _retrieve(front, pb.RetrieveResponse(forward_backward=result), PROTOBUF)
    records = wire.TinkerWireForwardBackwardOutput.FromString(response.content).loss_fn_outputs
    shapes = [list(r.fields["logprobs"].trailing_shape) for r in records]
    assert (shapes, [r.num_datums for r in records]) == ([[], [2]], [1, 1])


async def test_a_forward_backward_result_as_json_for_older_clients(front: Front) -> None:
    response = await _retrieve(front, pb.RetrieveResponse(forward_backward=FWDBWD))
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "loss_fn_output_type": "ArrayRecord",
        "loss_fn_outputs": [
            {"logprobs": {"data": [-1.0, -2.0], "dtype": "float32", "shape": [2]}},
            {"logprobs": {"data": [-0.5], "dtype": "float32", "shape": [1]}},
        ],
        "metrics": {"loss:sum": 3.5},
    }


async def test_a_metric_key_clients_cannot_split_fails_the_future(front: Front) -> None:
    result = pb.ForwardBackwardResult(metrics={"loss": 1.0})
    response = await _retrieve(front, pb.RetrieveResponse(forward_backward=result), PROTOBUF)
    assert response.status_code == 200
    assert response.json()["category"] == "server" and "'loss'" in response.json()["error"]


SAMPLE = pb.SampleResult(
    sequences=[
        pb.SampledSequence(tokens=[7, 8], logprobs=[-0.25, -0.5], stop_reason="stop"),
        pb.SampledSequence(tokens=[9], logprobs=[-1.0], stop_reason="length"),
    ],
    prompt_logprobs=[math.nan, -2.0],
)


async def test_a_sample_result_as_protobuf(front: Front) -> None:
    accept = "application/x-protobuf, application/json"  # as older clients send it
    response = await _retrieve(front, pb.RetrieveResponse(sample=SAMPLE), accept)
    assert response.headers["content-type"] == PROTOBUF
    sample = wire.TinkerWireSampleResponse.FromString(response.content)
    first, second = sample.sequences
    assert first.stop_reason == wire.TINKER_WIRE_STOP_REASON_STOP
    assert second.stop_reason == wire.TINKER_WIRE_STOP_REASON_LENGTH
    assert np.frombuffer(first.tokens, "<i4").tolist() == [7, 8]
    assert np.frombuffer(first.logprobs, "<f4").tolist() == [-0.25, -0.5]
    prompt = np.frombuffer(sample.prompt_logprobs, "<f4")
    assert math.isnan(prompt[0]) and prompt[1] == -2.0


async def test_a_sample_result_as_json(front: Front) -> None:
    response = await _retrieve(front, pb.RetrieveResponse(sample=SAMPLE))
    assert response.json() == {
        "type": "sample",
        "sequences": [
            {"stop_reason": "stop", "tokens": [7, 8], "logprobs": [-0.25, -0.5]},
            {"stop_reason": "length", "tokens": [9], "logprobs": [-1.0]},
        ],
        "prompt_logprobs": [None, -2.0],
    }
    odd = pb.SampleResult(sequences=[pb.SampledSequence(stop_reason="eos")])
    failed = (await _retrieve(front, pb.RetrieveResponse(sample=odd), PROTOBUF)).json()
    assert failed["category"] == "server" and "'eos'" in failed["error"]
