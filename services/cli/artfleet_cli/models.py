"""`artfleet models list | show | delete | prune | export`: jobs' LoRA checkpoints."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from artfleet.v1 import trainer_pb2
from artfleet_cli import render
from artfleet_cli.client import TokenOpt, fail, trainer
from artfleet_cli.jobs import TargetOpt

app = typer.Typer(help="List, inspect, delete and export trained models.", no_args_is_help=True)


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


@app.command("list")
def list_models(
    experiment: str = typer.Option("", help="only this experiment's models"),
    as_json: bool = typer.Option(False, "--json", help="print the models as a JSON list"),
    target: str = TargetOpt,
    token: str = TokenOpt,
) -> None:
    """Every job's model with its checkpoints (newest job first; * = best). Piped, one
    tab-separated line per model (names and ids whole)."""
    with trainer(target, token) as stub:
        reply = stub.ModelsList(trainer_pb2.ModelsListRequest(experiment=experiment))
    if as_json:
        render.print_json(render.message_records(reply.models))
        return
    rows = [
        [
            m.name,
            *_origin(m),
            m.base_model or "-",
            m.experiment,
            m.config_hash or "-",
            ", ".join(f"{c.step}{'*' if c.best else ''}" for c in m.checkpoints) or "-",
            _size(sum(c.bytes for c in m.checkpoints)),
        ]
        for m in reply.models
    ]
    headers = ("model", "job", "state", "base", "experiment", "config", "checkpoints", "size")
    render.listing(headers, rows, ("model", "job"))


def _origin(m: trainer_pb2.ModelInfo) -> tuple[str, str]:
    """(job, state): a job's id and state; a Tinker run's id, and its kind and rank."""
    if m.HasField("tinker_run"):
        run = m.tinker_run
        return run.training_run_id, f"tinker run, rank {run.lora_rank}"
    return m.job_id, render.state_name(m.job_state)


@app.command()
def show(model: str, target: str = TargetOpt, token: str = TokenOpt) -> None:
    """One model: its job, base model, path and checkpoints (* = best by the job's metric)."""
    with trainer(target, token) as stub:
        m = stub.ModelsGet(trainer_pb2.ModelsGetRequest(model=model))
    job, state = _origin(m)
    render.console.print(
        f"{m.name}: {'tinker run' if m.HasField('tinker_run') else 'job'} {job} ({state}), "
        f"base {m.base_model}, "
        f"experiment {m.experiment}, config {m.config_hash or '-'}\npath {m.path}",
        markup=False,
    )
    table = Table("step", "size", "best")
    for c in m.checkpoints:
        table.add_row(str(c.step), _size(c.bytes), "*" if c.best else "")
    render.console.print(table)


@app.command()
def delete(
    model: str = typer.Argument(..., help="name (every checkpoint) or name@step"),
    yes: bool = typer.Option(False, "--yes", help="do not ask"),
    target: str = TargetOpt,
    token: str = TokenOpt,
) -> None:
    """Delete a model or one checkpoint; refused while its job is queued or running."""
    if not yes and not typer.confirm(f"delete {model}?"):
        raise SystemExit(1)
    with trainer(target, token) as stub:
        reply = stub.ModelsDelete(trainer_pb2.ModelsDeleteRequest(model=model))
    render.console.print(f"deleted checkpoints {list(reply.deleted_steps)} of {model}")


@app.command()
def prune(
    model: str = typer.Argument(..., help="model name"),
    keep: int = typer.Option(..., "--keep", min=0, help="the newest checkpoints to keep"),
    yes: bool = typer.Option(False, "--yes", help="delete (default: only list what would go)"),
    as_json: bool = typer.Option(False, "--json", help="print the outcome as JSON"),
    target: str = TargetOpt,
    token: str = TokenOpt,
) -> None:
    """Delete all but the newest N checkpoints; never the one marked best, nor a running
    job's latest (allowed while it runs). Lists what would go unless --yes."""
    request = trainer_pb2.ModelsPruneRequest(model=model, keep=keep, dry_run=not yes)
    with trainer(target, token) as stub:
        reply = stub.ModelsPrune(request)
    if as_json:
        render.print_json(render.message_records([reply]))
        return
    rows = [[str(c.step), "keep", c.reason, _size(c.bytes)] for c in reply.kept]
    rows += [[str(c.step), "delete", c.reason, _size(c.bytes)] for c in reply.deleted]
    render.listing(("step", "action", "why", "size"), sorted(rows, key=lambda r: int(r[0])), ())
    freed = _size(sum(c.bytes for c in reply.deleted))
    steps = [c.step for c in reply.deleted]
    if not steps:
        render.console.print(f"nothing to delete in {reply.model}", markup=False)
    elif reply.dry_run:
        render.console.print(
            f"would delete checkpoints {steps} of {reply.model} ({freed}); "
            "run again with --yes to delete them",
            markup=False,
        )
    else:
        render.console.print(
            f"deleted checkpoints {steps} of {reply.model} ({freed})", markup=False
        )


@app.command()
def export(
    model: str = typer.Argument(..., help="name@step, or name for its latest checkpoint"),
    out: Path = typer.Option(
        ..., "--out", help="directory to write (peft loads an adapter; vLLM a full model)"
    ),
    target: str = TargetOpt,
    token: str = TokenOpt,
) -> None:
    """Write the checkpoint's LoRA adapter (adapter_config.json, adapter_model.safetensors),
    or a full fine-tune's model folder (config.json, model.safetensors, the tokenizer)."""
    if out.exists() and any(out.iterdir()):
        fail(f"--out {out} exists and is not empty")
    written: dict[str, int] = {}
    step = 0
    with trainer(target, token) as stub:
        for chunk in stub.ModelsExport(trainer_pb2.ModelsExportRequest(model=model)):
            path = (out / chunk.file).resolve()
            if out.resolve() not in path.parents:
                fail(f"the trainer sent a file outside the adapter directory: {chunk.file}", 1)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab" if chunk.file in written else "wb") as handle:
                handle.write(chunk.data)
            written[chunk.file] = written.get(chunk.file, 0) + len(chunk.data)
            step = chunk.step
    render.console.print(f"exported {model} (step {step}) to {out}: {', '.join(sorted(written))}")
