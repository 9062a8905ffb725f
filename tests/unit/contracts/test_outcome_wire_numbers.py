"""`RunGroupResponse.outcome` (3) and `BatchGroup.outcome` (4) were named `reward`: the
numbers stayed, so bytes written before the rename (batches live in Redis as binary
protobuf) read the same. The bytes here are built by hand, by field number, as the old
schema wrote them."""

from __future__ import annotations

import pytest
from google.protobuf.message import Message

from artfleet.v1 import batch_pb2, rollout_pb2
from artfleet.v1 import common_pb2 as pb

OUTCOME = pb.RewardOutcome(
    dropped=[1], fail_job="scorer 'judge' failed", failures=[pb.ScorerFailure(scorer="judge")]
)


def _length_delimited(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128  # a one-byte length keeps the hand encoding short
    return bytes([number << 3 | 2, len(payload)]) + payload


@pytest.mark.parametrize(
    ("message", "number"), [(batch_pb2.BatchGroup, 4), (rollout_pb2.RunGroupResponse, 3)]
)
def test_bytes_from_before_the_rename_read_as_outcome(message: type[Message], number: int) -> None:
    assert message.DESCRIPTOR.fields_by_name["outcome"].number == number
    stored = _length_delimited(1, b"g-1") if message is batch_pb2.BatchGroup else b""
    stored += _length_delimited(number, OUTCOME.SerializeToString())
    read = message.FromString(stored)
    assert read.outcome == OUTCOME  # type: ignore[attr-defined]
    assert read.SerializeToString() == stored  # and written back the same
