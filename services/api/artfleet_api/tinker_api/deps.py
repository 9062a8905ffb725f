"""The trainer's TinkerApi stub and deadlines, as a route dependency."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from artfleet.v1 import tinker_api_pb2_grpc as pb_grpc


@dataclass
class TinkerApi:
    stub: pb_grpc.TinkerApiStub
    timeout_s: float  # a unary call's deadline
    wait_s: float  # how long retrieve_future holds a pending future


def tinker_api(request: Request) -> TinkerApi:
    settings = request.app.state.settings
    stub = request.app.state.backends.tinker_api
    return TinkerApi(stub, settings.rpc_timeout_s, settings.tinker_api_wait_s)


Api = Annotated[TinkerApi, Depends(tinker_api)]
