"""`artfleet demo` and `artfleet fleet up`: the whole fleet on this machine."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import typer

from artfleet import evaluation
from artfleet.cli import render
from artfleet.cli.client import trainer
from artfleet.cli.fleet import LocalFleet, isolation_notice, vllm_python
from artfleet.jobspec import JobSpecModel, ScorerModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2

WorkdirOpt = typer.Option(Path(".artfleet"), "--workdir", help="state, logs and checkpoints")
EngineOpt = typer.Option(
    "auto",
    "--engine",
    help="who serves the policy: vllm (the inference service), torch (the trainer's own "
    "server), auto (vllm where a vLLM environment is found, else torch)",
)
ENGINES = ("auto", "vllm", "torch")


def pick_engine(engine: str) -> str:
    """`auto` → vllm when a vLLM environment is found (make install builds one), else torch;
    an explicit `vllm` without one is a usage error (exit 2)."""
    if engine not in ENGINES:
        render.console.print(f"--engine: one of {', '.join(ENGINES)}", markup=False)
        raise SystemExit(2)
    found = bool(vllm_python())
    if engine == "vllm" and not found:
        render.console.print(
            "--engine vllm: no Python with vLLM here (make install builds .venv-vllm; or set "
            "ARTFLEET_INFERENCE_VLLM_PYTHON)",
            markup=False,
        )
        raise SystemExit(2)
    if engine == "auto":
        engine = "vllm" if found else "torch"
        if not found:
            render.console.print(
                "note: no vLLM environment found (make install builds .venv-vllm): the "
                "trainer serves the policy itself",
                markup=False,
            )
    return engine


def demo_spec(steps: int, groups: int, rollouts: int, eval_k: int, seed: int) -> JobSpecModel:
    """The demo's job: math-single, answer_check reward, evaluated on the whole test split
    before step 1 and after the last step. bench/learning_bench.py measures this setting
    (docs/learning.md): the 135M policy learns to answer briefly, ending with the result."""
    return JobSpecModel(
        name="demo",
        environment="math-single",
        steps=steps,
        groups_per_step=groups,
        rollouts_per_group=rollouts,
        learning_rate=5e-4,
        max_turns=1,
        max_tokens=48,
        seed=seed,
        reward=[ScorerModel(name="answer_check")],
        eval_every_steps=steps,
        eval_split="test",
        eval_k=eval_k,
    )


def demo(
    steps: int = typer.Option(4, min=1),
    groups_per_step: int = typer.Option(8, min=1),
    rollouts_per_group: int = typer.Option(8, min=2),
    eval_k: int = typer.Option(2, min=1, help="samples per held-out task, before and after"),
    seed: int = typer.Option(7, min=0),
    workdir: Path = WorkdirOpt,
    engine: str = EngineOpt,
) -> None:
    """Start a local fleet (Redis + the four services), train SmolLM2 with LoRA GRPO on the
    bundled math-single problems, evaluate it on held-out problems before and after, show
    progress and a summary, then stop everything."""
    spec = demo_spec(steps, groups_per_step, rollouts_per_group, eval_k, seed)
    fleet = LocalFleet(workdir.resolve(), engine=pick_engine(engine))
    start = time.monotonic()
    render.console.print(f"starting the fleet in {fleet.workdir} (logs in logs/) ...")
    if notice := isolation_notice():
        render.console.print(notice, markup=False)
    try:
        fleet.start()
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


def fleet_up(workdir: Path = WorkdirOpt, engine: str = EngineOpt) -> None:
    """Start a local fleet and keep it up until Ctrl-C."""
    fleet = LocalFleet(workdir.resolve(), engine=pick_engine(engine))
    if notice := isolation_notice():
        render.console.print(notice, markup=False)
    fleet.start()
    token_file = fleet.workdir / "token"
    token_file.touch(mode=0o600)
    token_file.write_text(fleet.token)
    # The token goes to a private file, not to the terminal or its scrollback.
    render.console.print(
        f"fleet up. export ARTFLEET_TRAINER_TARGET={fleet.trainer_target} "
        f"ARTFLEET_API_TOKEN=$(cat {token_file})\n"
        f"console and HTTP API: {fleet.api_url} (log in with the token)\n"
        f"policy ({fleet.engine}): {fleet.policy_base_url}"
    )
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        done.wait()
    finally:
        fleet.stop()
