"""The Tinker-compatible API's synchronous lookups: the server's models,
sampling sessions, training runs and their checkpoints, a checkpoint's weights."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from artfleet.v1 import tinker_api_pb2 as pb
from artfleet_api.tinker_api import bodies as b
from artfleet_api.tinker_api import wire
from artfleet_api.tinker_api.deps import Api
from artfleet_api.tinker_api.errors import WireError
from artfleet_api.tinker_api.refused import not_implemented

router = APIRouter()


@router.get("/get_server_capabilities")
async def get_server_capabilities(api: Api) -> dict[str, Any]:
    reply = await api.stub.Capabilities(pb.CapabilitiesRequest(), timeout=api.timeout_s)
    return wire.capabilities_json(reply)


@router.get("/samplers/{sampler_id}")
async def get_sampler(sampler_id: str, api: Api) -> dict[str, Any]:
    request = pb.GetSamplerRequest(sampler_id=sampler_id)
    return wire.sampler_json(await api.stub.GetSampler(request, timeout=api.timeout_s))


@router.post("/weights_info")
async def weights_info(body: b.WeightsInfoBody, api: Api) -> dict[str, Any]:
    request = pb.WeightsInfoRequest(tinker_path=body.tinker_path)
    return wire.weights_info_json(await api.stub.WeightsInfo(request, timeout=api.timeout_s))


@router.get("/training_runs")
async def list_training_runs(
    api: Api,
    limit: int = Query(default=20, ge=0),
    offset: int = Query(default=0, ge=0),
) -> dict[str, Any]:
    request = pb.ListRunsRequest(limit=limit, offset=offset)
    reply = await api.stub.ListRuns(request, timeout=api.timeout_s)
    cursor = {"offset": offset, "limit": limit, "total_count": reply.total}
    return {"training_runs": [wire.run_json(r) for r in reply.runs], "cursor": cursor}


@router.get("/training_runs/{training_run_id}")
async def get_training_run(training_run_id: str, api: Api) -> dict[str, Any]:
    request = pb.GetRunRequest(training_run_id=training_run_id)
    return wire.run_json(await api.stub.GetRun(request, timeout=api.timeout_s))


@router.get("/training_runs/{training_run_id}/checkpoints")
async def list_checkpoints(training_run_id: str, api: Api) -> dict[str, Any]:
    request = pb.ListCheckpointsRequest(training_run_id=training_run_id)
    reply = await api.stub.ListCheckpoints(request, timeout=api.timeout_s)
    return {"checkpoints": [wire.checkpoint_json(c) for c in reply.checkpoints], "cursor": None}


@router.delete("/training_runs/{training_run_id}/checkpoints/{checkpoint_id:path}")
async def delete_checkpoint(training_run_id: str, checkpoint_id: str, api: Api) -> dict[str, Any]:
    """`checkpoint_id` is `<kind>/<name>`: one slash. With a third segment `publish` the
    path is unpublishing, which this server does not do."""
    parts = checkpoint_id.split("/")
    if len(parts) == 3 and parts[2] == "publish":
        route = "DELETE /api/v1/training_runs/{id}/checkpoints/{checkpoint_id}/publish"
        raise not_implemented(route)
    if len(parts) != 2:
        raise WireError(f"checkpoint_id: {checkpoint_id!r} is not '<kind>/<name>'", 404)
    request = pb.DeleteCheckpointRequest(
        training_run_id=training_run_id, checkpoint_id=checkpoint_id
    )
    await api.stub.DeleteCheckpoint(request, timeout=api.timeout_s)
    return {}
