"""Listings keep ids whole when piped or narrow, and take `--json`: `jobs list`, `models
list`, `envs list`. The trainer is an in-process Trainer servicer on a real gRPC server."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from rich.console import Console
from typer.testing import CliRunner

from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli import render
from artfleet_cli.main import app

JOB_ID = "0f3a9c1e2b7d4e8f9a0b1c2d3e4f5a6b-long-job-id"
MODEL = f"agent-{JOB_ID}"
TINKER_RUN, TINKER_MODEL, BASE = "5e1f:train:0", "5e1f-train-0", "/models/smollm2"


class ListingTrainer(trainer_pb2_grpc.TrainerServicer):
    def ListJobs(self, request: object, context: object) -> trainer_pb2.ListJobsResponse:
        job = pb.Job(id=JOB_ID, state=pb.JOB_STATE_RUNNING, policy=f"{MODEL}@2")
        job.spec.name, job.spec.steps = "agent", 5
        return trainer_pb2.ListJobsResponse(jobs=[job])

    def ModelsList(self, request: object, context: object) -> trainer_pb2.ModelsListResponse:
        model = trainer_pb2.ModelInfo(name=MODEL, job_id=JOB_ID, experiment="exp1")
        model.checkpoints.add(step=2, bytes=1000, best=True)
        run = trainer_pb2.ModelInfo(name=TINKER_MODEL, experiment="tinker", base_model=BASE)
        run.tinker_run.training_run_id, run.tinker_run.lora_rank = TINKER_RUN, 8
        return trainer_pb2.ModelsListResponse(models=[model, run])


@pytest.fixture
def target() -> Iterator[str]:
    server = grpc.server(ThreadPoolExecutor(2))
    trainer_pb2_grpc.add_TrainerServicer_to_server(ListingTrainer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)


def _cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"ARTFLEET_API_TOKEN": "t", "COLUMNS": "40"})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("command", [("jobs", "list"), ("models", "list")])
def test_piped_listings_are_tab_separated_with_whole_ids(
    target: str, command: tuple[str, ...]
) -> None:
    lines = _cli(*command, "--target", target).splitlines()
    assert len(lines) >= 2 and "\t" in lines[0]
    assert JOB_ID in lines[1].split("\t")


def test_models_list_shows_a_tinker_run_as_one(target: str) -> None:
    header, _job, run = _cli("models", "list", "--target", target).splitlines()
    row = dict(zip(header.split("\t"), run.split("\t"), strict=True))
    assert row["model"] == TINKER_MODEL and row["job"] == TINKER_RUN
    assert row["state"] == "tinker run, rank 8" and row["base"] == BASE


@pytest.mark.parametrize("width", [40, 120, 250])
def test_a_terminal_listing_keeps_ids_whole_at_any_width(width: int) -> None:
    rows = [render.job_row(pb.Job(id=JOB_ID, policy=f"{MODEL}@2"))]
    written = io.StringIO()
    terminal = Console(file=written, width=width, force_terminal=True)
    render.listing(render.JOB_COLUMNS, rows, ("id", "policy"), out=terminal)
    assert JOB_ID in written.getvalue() and f"{MODEL}@2" in written.getvalue()


def test_json_listings(target: str) -> None:
    jobs = json.loads(_cli("jobs", "list", "--json", "--target", target))
    assert jobs[0]["id"] == JOB_ID and jobs[0]["state"] == "JOB_STATE_RUNNING"
    models = json.loads(_cli("models", "list", "--json", "--target", target))
    assert models[0]["name"] == MODEL and models[0]["checkpoints"][0]["best"] is True
    assert models[1]["tinker_run"] == {"training_run_id": TINKER_RUN, "lora_rank": 8}
    envs = json.loads(_cli("envs", "list", "--json"))
    assert "shell-tasks" in {e["name"] for e in envs["environments"]}
