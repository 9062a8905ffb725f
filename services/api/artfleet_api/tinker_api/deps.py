"""The trainer's TinkerApi stub and deadlines, as a route dependency."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from artfleet.v1 import tinker_api_pb2_grpc as pb_grpc


@dataclass
class TrainingApi:
    stub: pb_grpc.TinkerApiStub
    timeout_s: float  # a unary call's deadline
    wait_s: float  # how long retrieve_future holds a pending future


def tinker_api(request: Request) -> TrainingApi:
    settings = request.app.state.settings
    stub = request.app.state.backends.tinker_api
    return TrainingApi(stub, settings.rpc_timeout_s, settings.tinker_api_wait_s)


Api = Annotated[TrainingApi, Depends(training_api)]
