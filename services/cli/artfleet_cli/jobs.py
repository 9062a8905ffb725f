"""`artfleet jobs ...`: submit, list, status, watch, cancel, resume."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import typer
import yaml

from artfleet.contracts.errors import InvalidArgument
from artfleet.specs.job import (
    CorrectionModel,
    GrpoModel,
    JobSpecModel,
    SftModel,
    spec_to_proto,
    validate_spec,
)
from artfleet.specs.yaml_text import DuplicateKey, load_yaml
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2
from artfleet_cli import render
from artfleet_cli.client import TokenOpt, fail, trainer
from artfleet_cli.spec_flags import derive_flags, flag_values, with_flags
from artfleet_cli.watch_stream import resumable

app = typer.Typer(
    help="Submit, inspect, follow, cancel and resume training jobs.", no_args_is_help=True
)

TargetOpt = typer.Option(
    "127.0.0.1:50051", "--target", envvar="ARTFLEET_TRAINER_TARGET", help="trainer gRPC address"
)


def load_spec(path: Path | None, overrides: dict[str, Any]) -> JobSpecModel:
    """YAML file (optional) + flags; a bad spec is a usage error naming the field."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = load_yaml(path.read_text(), str(path))
        except DuplicateKey as exc:
            fail(str(exc))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            fail(f"cannot read job file {path}: {exc}")
        if not isinstance(loaded, dict):
            fail(f"{path}: a job file is a YAML mapping of spec fields")
        data.update(loaded)
    for key, value in overrides.items():
        if value is None:
            continue
        parent, _, child = key.partition(".")
        if child:  # a flag of a nested block (`sft.epochs`)
            if not isinstance(data.get(parent), dict):
                data[parent] = {}
            data[parent][child] = value
        else:
            data[key] = value
    try:
        return validate_spec(data)
    except InvalidArgument as exc:
        fail(f"invalid job spec: {exc}")


# Flags whose names are not their spec key's (the training scripts' names, which users'
# scripts type): the first is shown first. Type, default and help are the spec's.
FLAG_NAMES = {
    "base_model": ("model", "base-model"),
    "environment": ("env",),
    "experiment": ("experiment", "experiment-name"),
    "sft.data_path": ("offline-data", "sft-data"),  # the terminal agent's train.py flag
}
# Every scalar field of the job spec, of its `grpo:` block, of its `sft:` block (as
# --sft-<key>) and of its `off_policy_correction:` block (as --correction-<key>) is a flag
# of its own.
DERIVED_FLAGS = (
    derive_flags(JobSpecModel, what="job spec", names=FLAG_NAMES)
    + derive_flags(GrpoModel, what="GRPO: ART's backend.train option", prefix="grpo.")
    + derive_flags(
        SftModel, what="SFT warm-start", prefix="sft.", flag_prefix="sft-", names=FLAG_NAMES
    )
    + derive_flags(
        CorrectionModel,
        what="off-policy correction",
        prefix="off_policy_correction.",
        flag_prefix="correction-",
    )
)


# The command's own parameters are the spec file and how to submit it: none is a spec key.
@app.command()
@with_flags(DERIVED_FLAGS)
def submit(
    file: Path | None = typer.Argument(None, help="job spec YAML", show_default=False),
    *,
    watch: bool = typer.Option(False, "--watch", help="follow the job until it ends"),
    target: str = TargetOpt,
    token: str = TokenOpt,
    **derived: Any,
) -> None:
    """Submit a job from a YAML file and/or flags (flags win). Every spec key is a flag:
    `max_context_tokens` is --max-context-tokens, `grpo: {epsilon: 0.2}` is --epsilon 0.2."""
    spec = load_spec(file, flag_values(DERIVED_FLAGS, derived))
    with trainer(target, token) as stub:
        # One key per invocation: a call sent again (a retry) returns the job, not a second.
        request = trainer_pb2.SubmitJobRequest(
            spec=spec_to_proto(spec), idempotency_key=uuid.uuid4().hex
        )
        job = stub.SubmitJob(request)
    render.console.print(
        f"submitted job {job.id} (experiment {job.spec.experiment}, config {job.config_hash})"
    )
    if watch:
        _watch(job.id, target, token)


@app.command("list")
def list_jobs(
    limit: int = typer.Option(20, min=0),
    experiment: str = typer.Option("", help="only this experiment's jobs"),
    as_json: bool = typer.Option(False, "--json", help="print the jobs as a JSON list"),
    target: str = TargetOpt,
    token: str = TokenOpt,
) -> None:
    """List jobs, newest first; queued jobs with their queue position (1 = runs next).
    Piped, one tab-separated line per job (ids whole)."""
    with trainer(target, token) as stub:
        reply = stub.ListJobs(trainer_pb2.ListJobsRequest(limit=limit, experiment=experiment))
    if as_json:
        render.print_json(render.message_records(reply.jobs))
    else:
        rows = [render.job_row(j) for j in reply.jobs]
        render.listing(render.JOB_COLUMNS, rows, ("id", "policy"))


@app.command()
def status(job_id: str, target: str = TargetOpt, token: str = TokenOpt) -> None:
    """Show a job and its per-step figures."""
    with trainer(target, token) as stub:
        render.job_details(stub.GetJob(trainer_pb2.GetJobRequest(job_id=job_id)))


@app.command()
def watch(job_id: str, target: str = TargetOpt, token: str = TokenOpt) -> None:
    """Follow a job with a progress bar until it ends; exits 1 unless it SUCCEEDED."""
    _watch(job_id, target, token)


def _watch(job_id: str, target: str, token: str) -> None:
    with trainer(target, token) as stub:
        job = stub.GetJob(trainer_pb2.GetJobRequest(job_id=job_id))

        def open_stream(from_seq: int) -> Iterable[pb.ProgressEvent]:
            request = trainer_pb2.WatchJobRequest(job_id=job_id, from_seq=from_seq)
            return stub.WatchJob(request)

        render.follow(resumable(open_stream, _say), job.spec.steps)
        job = stub.GetJob(trainer_pb2.GetJobRequest(job_id=job_id))
    render.job_details(job)
    if job.state != pb.JOB_STATE_SUCCEEDED:
        raise SystemExit(1)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@app.command()
def cancel(job_id: str, target: str = TargetOpt, token: str = TokenOpt) -> None:
    """Cancel a job: a running one stops after its current step."""
    with trainer(target, token) as stub:
        job = stub.CancelJob(trainer_pb2.CancelJobRequest(job_id=job_id))
    render.console.print(f"job {job.id}: {render.state_name(job.state)}")


@app.command()
def resume(job_id: str, target: str = TargetOpt, token: str = TokenOpt) -> None:
    """Queue a FAILED or CANCELLED job again: it goes on after its last checkpoint, with
    its steps, evals and the reason it ended kept."""
    with trainer(target, token) as stub:
        job = stub.ResumeJob(trainer_pb2.ResumeJobRequest(job_id=job_id))
    render.console.print(
        f"job {job.id}: {render.state_name(job.state)}, resumes after step {job.completed_steps}"
    )
