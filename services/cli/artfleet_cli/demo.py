"""`artfleet demo`: a local fleet, one short math-single job evaluated before and after
training, a summary, then everything stopped."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import typer

from artfleet.contracts import evaluation
from artfleet.runtime.ports import PortHold
from artfleet.specs.job import JobSpecModel, ScorerModel, spec_to_proto
from artfleet.specs.scorer_params import ANSWER_CHECK
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2
from artfleet_cli import render
from artfleet_cli.client import fail, trainer
from artfleet_cli.fleet import PORT_NAMES, VLLM_PYTHON, LocalFleet, isolation_notice
from artfleet_cli.fleet_config import (
    PREFIX,
    ConfigError,
    known_keys,
    merge_settings,
    parse_sets,
    plan_ports,
    read_env_file,
)
from artfleet_cli.fleet_up import EngineOpt, EnvFileOpt, SetOpt, WorkdirOpt, pick_engine


def demo_spec(
    steps: int,
    groups: int,
    rollouts: int,
    eval_k: int,
    seed: int,
    *,
    learning_rate: float,
    eval_temperature: float,
) -> JobSpecModel:
    """The demo's job: math-single, answer_check reward, evaluated on the whole test split
    before step 1 and after the last step. bench/learning_bench.py measures this setting
    (docs/learning.md): the 135M policy learns to answer briefly, ending with the result."""
    return JobSpecModel(
        name="demo",
        environment="math-single",
        steps=steps,
        groups_per_step=groups,
        rollouts_per_group=rollouts,
        learning_rate=learning_rate,
        max_turns=1,
        max_tokens=48,
        seed=seed,
        reward=[ScorerModel(name=ANSWER_CHECK)],
        eval_every_steps=steps,
        eval_split="test",
        eval_k=eval_k,
        eval_temperature=eval_temperature,
    )


# The options' values are the demo's own job, measured by bench/learning_bench.py, not job
# spec defaults: a higher rate and larger groups than a job spec's defaults make learning
# show within four steps on a CPU.
def demo(
    steps: int = typer.Option(4, min=1),
    groups_per_step: int = typer.Option(8, min=1),
    rollouts_per_group: int = typer.Option(8, min=2),
    learning_rate: float = typer.Option(5e-4, min=0.0, max=1.0),
    eval_k: int = typer.Option(1, min=1, help="samples per held-out task, before and after"),
    eval_temperature: float = typer.Option(
        0.0, min=0.0, max=5.0, help="of the held-out samples (0 = greedy)"
    ),
    seed: int = typer.Option(
        7, min=0, help="training task order, the LoRA's initialisation and sampling"
    ),
    workdir: Path = WorkdirOpt,
    engine: str = EngineOpt,
    env_file: Path | None = EnvFileOpt,
    settings: list[str] = SetOpt,
) -> None:
    """Start a local fleet (Redis + the four services), train SmolLM2 with LoRA GRPO on the
    bundled math-single problems, evaluate it on held-out problems before and after, show
    progress and a summary, then stop everything.

    The fleet's settings as `fleet up` takes them (not remembered): this environment's
    ARTFLEET_* variables that a service reads, then --env-file, then --set. Exported
    ARTFLEET_* variables it does not pass on are named on stderr."""
    spec = demo_spec(
        steps,
        groups_per_step,
        rollouts_per_group,
        eval_k,
        seed,
        learning_rate=learning_rate,
        eval_temperature=eval_temperature,
    )
    fleet = demo_fleet(workdir.resolve(), engine, env_file, settings, os.environ)
    start = time.monotonic()
    render.console.print(f"starting the fleet in {fleet.workdir} (logs in logs/) ...")
    if notice := isolation_notice():
        render.console.print(notice, markup=False)
    # SIGTERM ends the demo as Ctrl-C does (the fleet stopped in `finally`), not silently
    # with its processes left running under PID 1.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        fleet.start(fleet.own_settings().fleet_start_timeout_s)
        render.console.print(
            f"fleet up in {time.monotonic() - start:.0f}s; trainer at {fleet.trainer_target}; "
            f"policy served by {fleet.engine} at {fleet.policy_base_url}"
        )
        job = _run_job(fleet, spec)
    finally:
        codes = fleet.stop()
        render.console.print(
            "fleet stopped: " + ", ".join(f"{k} exit {v}" for k, v in codes.items())
        )
    render.console.print(f"demo wall time: {time.monotonic() - start:.0f}s")
    if job.state != pb.JOB_STATE_SUCCEEDED:
        raise SystemExit(1)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def demo_fleet(
    workdir: Path,
    engine: str,
    env_file: Path | None,
    sets: list[str],
    environ: Mapping[str, str],
) -> LocalFleet:
    """The demo's fleet with its settings merged as `fleet up` merges them and checked as
    each service will parse them, before anything starts (exit 2 naming the setting)."""
    try:
        given = read_env_file(env_file) if env_file else {}
        set_values = parse_sets(sets)
        # Planned now: the settings' check builds each service's environment, ports and all.
        held = PortHold()
        fleet = LocalFleet(workdir, ports=plan_ports(PORT_NAMES, {}, held.pick), held=held)
        owned = fleet.owned_keys()
        fleet.settings, ignored = merge_settings(environ, given, set_values, known_keys(), owned)
        warn_unused(ignored, sorted(k for k in environ if k in owned))
        fleet.engine = pick_engine(engine, fleet.settings.get(VLLM_PYTHON, ""))
        fleet.check_settings()
    except ConfigError as exc:
        fail(str(exc))
    return fleet


def warn_unused(unread: list[str], owned: list[str]) -> None:
    """Exported ARTFLEET_* variables the demo does not pass on, named on stderr: the run
    they were meant to change would otherwise look like it took them."""
    reasons = []
    if unread:
        reasons.append(f"{', '.join(unread)} (no service reads {_it_them(unread)})")
    if owned:
        reasons.append(f"{', '.join(owned)} (the demo's fleet sets {_it_them(owned)} itself)")
    if reasons:
        print(
            f"warning: artfleet demo does not use these exported {PREFIX}* variables: "
            + "; ".join(reasons),
            file=sys.stderr,
        )


def _it_them(names: list[str]) -> str:
    return "it" if len(names) == 1 else "them"


def _run_job(fleet: LocalFleet, spec: JobSpecModel) -> pb.Job:
    with trainer(fleet.trainer_target, fleet.token) as stub:
        job = stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
        render.console.print(
            f"submitted job {job.id}: {spec.steps} steps × "
            f"{spec.groups_per_step} groups × {spec.rollouts_per_group} rollouts"
        )
        render.follow(stub.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id)), spec.steps)
        job = stub.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
    render.console.print(render.summary_table(job))
    render.console.print("\n".join(render.reward_chart(job.steps)), markup=False)
    if job.evals:
        render.console.print(render.evals_table(job.evals))
        render.console.print(_gain_line(job), markup=False)
    if job.error:
        render.console.print(f"[red]error:[/red] {job.error}")
    return job


def _gain_line(job: pb.Job) -> str:
    """Held-out success before vs after training, paired over tasks."""
    first, last = job.evals[0], job.evals[-1]
    result = evaluation.compare(first, last, metric="success")
    low, high = result.ci95
    return (
        f"held-out success: {first.success_rate:.1%} before (step {first.step}) -> "
        f"{last.success_rate:.1%} after (step {last.step}): "
        f"{100 * result.mean_delta:+.1f} points (95% CI {100 * low:+.1f} .. {100 * high:+.1f}, "
        f"paired bootstrap over {len(result.rows)} tasks)"
    )
