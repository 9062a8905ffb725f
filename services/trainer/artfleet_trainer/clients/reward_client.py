"""The reward service as the trainer sees it: a job's reward spec is checked at submit."""

from __future__ import annotations

import grpc

from artfleet.contracts.errors import InvalidArgument, Unavailable
from artfleet.runtime.rpc.client import aio_channel
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import reward_pb2, reward_pb2_grpc


class RewardClient:
    def __init__(self, target: str, token: str) -> None:
        self._target = target
        self._token = token

    async def validate(self, spec: pb.RewardSpec) -> list[str]:
        """The scorer names the spec resolves to; InvalidArgument names the bad field."""
        async with aio_channel(self._target, self._token) as channel:
            try:
                reply = await reward_pb2_grpc.RewardStub(channel).ValidateSpec(
                    reward_pb2.ValidateSpecRequest(spec=spec), timeout=30
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    raise InvalidArgument(exc.details() or "invalid reward spec") from None
                raise Unavailable(f"reward service {self._target}: {exc.details()}") from None
        return list(reply.scorers)
