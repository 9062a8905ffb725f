"""Our TinkerWire messages against bytes built by hand from Tinker's field numbers and
wire types (the wire carries no names): what its clients send parses, what we send is
what its clients parse. A round trip through the real client library is an integration
test's (its own environment)."""

from __future__ import annotations

import struct

import numpy as np

from artfleet.v1 import tinker_wire_pb2 as wire

VARINT, I64, LEN = 0, 1, 2


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        out += bytes([low | (0x80 if n else 0)])
        if not n:
            return out


def _tag(number: int, kind: int) -> bytes:
    return _varint(number << 3 | kind)


def _len(number: int, payload: bytes) -> bytes:
    return _tag(number, LEN) + _varint(len(payload)) + payload


def _int(number: int, value: int) -> bytes:
    return _tag(number, VARINT) + _varint(value)


def _double(number: int, value: float) -> bytes:
    return _tag(number, I64) + struct.pack("<d", value)


def _entry(key: str, value: bytes) -> bytes:
    """A map entry: key 1, value 2 (the value's own tag and bytes)."""
    return _len(1, key.encode()) + value


# ForwardBackwardRequest as Tinker's client writes it: model_id 1, seq_id 2, data 3
# (Datum: model_input 1 = Chunk; loss_fn_inputs 2 = map<string, Tensor>), loss_fn 4,
# loss_fn_config 5, forward_only 6, loss_fn_config_v2 7; Chunk: encoded_text 1, image 2,
# dmel 3; Tensor: dense 1, sparse_csr 2, dtype 3, shape 4 (packed); provenance spans (3) are
# not ours and are skipped.
TOKENS = np.asarray([11, 12, 13], "<i4").tobytes()
WEIGHTS = np.asarray([0.0, 1.0, 0.5], "<f4").tobytes()
TENSOR = _len(1, WEIGHTS) + _int(3, 1) + _len(4, _varint(3))
CSR = _len(1, np.asarray([7], "<i8").tobytes()) + _len(2, np.zeros(2, "<i8").tobytes())
SPARSE = _len(2, CSR) + _int(3, 2) + _len(4, _varint(1) + _varint(3))
DATUM = (
    _len(1, _len(1, _len(1, TOKENS)))
    + _len(1, _len(2, _len(1, b"png") + _len(2, b"png") + _int(3, 4)))
    + _len(1, _len(3, _len(1, b"mel")))
    + _len(2, _entry("weights", _len(2, TENSOR)))
    + _len(2, _entry("target_tokens", _len(2, SPARSE)))
    + _len(3, _len(1, _len(1, b"seq-0")))
)
REQUEST = (
    _len(1, b"S:train:0")
    + _int(2, 4)
    + _len(3, DATUM)
    + _len(4, b"ppo")
    + _len(5, _entry("clip", _double(2, 0.2)))
    + _int(6, 1)
    + _len(7, _entry("clip", _len(2, _double(1, 0.2))))
    + _len(7, _entry("mode", _len(2, _len(2, b"fast"))))
)


def test_a_forward_backward_request_from_tinkers_field_numbers() -> None:
    request = wire.TinkerWireForwardBackwardRequest.FromString(REQUEST)
    assert (request.model_id, request.seq_id, request.loss_fn) == ("S:train:0", 4, "ppo")
    assert request.forward_only and dict(request.loss_fn_config) == {"clip": 0.2}
    assert request.loss_fn_config_v2["clip"].number == 0.2
    assert request.loss_fn_config_v2["mode"].text == "fast"
    (datum,) = request.data
    kinds = [chunk.WhichOneof("chunk") for chunk in datum.model_input]
    assert kinds == ["encoded_text", "image", "dmel"]
    assert np.frombuffer(datum.model_input[0].encoded_text.tokens, "<i4").tolist() == [11, 12, 13]
    assert datum.model_input[1].image.expected_tokens == 4
    weights = datum.loss_fn_inputs["weights"]
    assert (weights.dtype, list(weights.shape)) == (wire.TINKER_WIRE_DTYPE_FLOAT32, [3])
    assert np.frombuffer(weights.dense, "<f4").tolist() == [0.0, 1.0, 0.5]
    targets = datum.loss_fn_inputs["target_tokens"]
    assert targets.WhichOneof("encoding") == "sparse_csr"
    assert (targets.dtype, list(targets.shape)) == (wire.TINKER_WIRE_DTYPE_INT64, [1, 3])
    assert np.frombuffer(targets.sparse_csr.values, "<i8").tolist() == [7]


def test_a_forward_backward_output_in_tinkers_field_numbers() -> None:
    # ForwardBackwardOutput: loss_fn_output_type 1, loss_fn_outputs 2 (ArrayRecord:
    # type_tag 1, fields 2 = map<string, BatchedTensor>, num_datums 3), metrics 3;
    # BatchedTensor: data 1, offsets 2, dtype 3, trailing_shape 4.
    output = wire.TinkerWireForwardBackwardOutput(loss_fn_output_type="ArrayRecord")
    output.metrics["loss:sum"] = 1.5
    record = output.loss_fn_outputs.add(num_datums=1)
    batched = record.fields["logprobs"]
    data, offsets = np.asarray([-1.0], "<f4").tobytes(), np.asarray([0, 4], "<i8").tobytes()
    batched.data, batched.offsets, batched.dtype = data, offsets, wire.TINKER_WIRE_DTYPE_FLOAT32
    batched_bytes = _len(1, data) + _len(2, offsets) + _int(3, 1)
    record_bytes = _len(2, _entry("logprobs", _len(2, batched_bytes))) + _int(3, 1)
    expected = (
        _len(1, b"ArrayRecord")
        + _len(2, record_bytes)
        + _len(3, _entry("loss:sum", _double(2, 1.5)))
    )
    assert output.SerializeToString(deterministic=True) == expected


def test_a_sample_response_in_tinkers_field_numbers() -> None:
    # SampleResponse: sequences 1, prompt_logprobs 2; SampledSequence: stop_reason 1
    # (STOP 0, LENGTH 1), tokens 2 (int32), logprobs 3 (float32).
    response = wire.TinkerWireSampleResponse()
    tokens, logprobs = np.asarray([5, 6], "<i4").tobytes(), np.asarray([-0.5, -1], "<f4").tobytes()
    response.sequences.add(
        stop_reason=wire.TINKER_WIRE_STOP_REASON_LENGTH, tokens=tokens, logprobs=logprobs
    )
    response.prompt_logprobs = np.asarray([np.nan], "<f4").tobytes()
    sequence = _int(1, 1) + _len(2, tokens) + _len(3, logprobs)
    expected = _len(1, sequence) + _len(2, np.asarray([np.nan], "<f4").tobytes())
    assert response.SerializeToString(deterministic=True) == expected
    # A sequence that stopped on its own: proto3 leaves the zero enum out.
    stopped = wire.TinkerWireSampledSequence(stop_reason=wire.TINKER_WIRE_STOP_REASON_STOP)
    assert stopped.SerializeToString() == b""
