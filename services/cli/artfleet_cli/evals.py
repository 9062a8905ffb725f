"""`artfleet eval run` and `artfleet eval compare`: a policy × an environment split × k
samples per task, through the rollout service (Rollout.RunGroup, scored by the reward
service, no training); and two such evaluations side by side with a paired test.

The policy is any OpenAI-compatible endpoint and model name; the endpoint defaults to the
fleet's policy (`ARTFLEET_POLICY_BASE_URL`, exported by `fleet up`'s fleet.env). The
fleet's policy endpoint serves a running job's policy, any checkpoint `name@step` of a
model under its ART path (a finished job's too; `name` alone: its latest), and a base
model by the name a job trained from (e.g. `smollm2-135m-instruct`). Any other endpoint
takes its key from a variable in the rollout service's environment (`--api-key-env`).
Without `--reward` the samples are scored as a job of the environment would be (an MCP
environment by its own evaluate tool).
"""

from __future__ import annotations

import queue
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from google.protobuf import json_format
from rich.table import Table

from artfleet.contracts import evaluation, trajlog
from artfleet.specs.base import default_of
from artfleet.specs.job import JobSpecModel, with_default_reward
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import rollout_pb2, rollout_pb2_grpc
from artfleet_cli import render
from artfleet_cli.client import TokenOpt, fail, service
from artfleet_cli.eval_progress import (
    PARTIAL_FILE,
    Stopped,
    TaskProgress,
    mark_partial,
    partial_note,
    stopped_by_signals,
)
from artfleet_cli.policy_check import check_base_url, check_model_name, check_policy
from artfleet_cli.rollout import (
    BaseUrlOpt,
    EnableThinkingOpt,
    EnvOpt,
    MaxTokensOpt,
    MaxTurnsOpt,
    RewardOpt,
    RolloutTargetOpt,
    TemperatureOpt,
    build_task,
    job_defaults,
    parse_reward,
    policy_url,
)

app = typer.Typer(help="Evaluate policies and compare evaluations.", no_args_is_help=True)
SUMMARY_FILE = "summary.json"
EARLY_STOP_TASKS = 3  # tasks that all failed alike before an eval stops early


def eval_tasks(info: rollout_pb2.EnvironmentInfo, split: str, max_tasks: int) -> list[str]:
    ids = [s.id for s in info.scenarios if s.split == split]
    if not ids:
        fail(f"environment {info.name!r} has no scenario in split {split!r}")
    return ids[:max_tasks] if max_tasks else ids


def write_outputs(
    out: Path, summary: pb.EvalSummary, responses: dict[str, rollout_pb2.RunGroupResponse]
) -> None:
    """summary.json plus one readable JSON record per trajectory under trajectories/."""
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY_FILE).write_text(
        json_format.MessageToJson(summary, preserving_proto_field_name=True)
    )
    for scenario, response in responses.items():
        episodes = list(response.episodes)
        for i, trajectory in enumerate(response.group.trajectories):
            meta = {"scenario_id": scenario, "step": summary.step, "policy": summary.policy}
            episode = episodes[i] if i < len(episodes) else None
            trajlog.write(
                out / "trajectories", f"{scenario}-{i}", trajlog.record(trajectory, meta, episode)
            )


def load_summary(path: Path) -> pb.EvalSummary:
    """An eval's summary.json, given as the file or its folder."""
    file = path / SUMMARY_FILE if path.is_dir() else path
    try:
        summary = json_format.Parse(file.read_text(), pb.EvalSummary())
    except (OSError, json_format.ParseError) as exc:
        fail(f"cannot read an evaluation from {path}: {exc}")
    note = partial_note(path)
    if note is not None:  # a stopped eval run's: compared on the tasks it has
        print(f"note: {note}", file=sys.stderr)
    return summary


def summary_table(summary: pb.EvalSummary) -> Table:
    table = Table("task", "samples", "successes", "pass@k", "reward mean")
    for r in summary.results:
        table.add_row(
            r.scenario_id,
            str(r.samples),
            str(r.successes),
            f"{evaluation.pass_at_k(r.samples, r.successes, summary.k):.3f}",
            f"{sum(r.rewards) / r.samples:+.3f}" if r.samples else "-",
        )
    return table


def group_error(response: rollout_pb2.RunGroupResponse) -> str | None:
    """The one error every sample of a group failed with; None if any came back or the
    failures differ."""
    if response.group.trajectories:
        return None
    errors = {f"{e.type}: {e.message}" for e in response.group.exceptions}
    if len(errors) == 1:
        return errors.pop()
    return None


def common_error(responses: list[rollout_pb2.RunGroupResponse]) -> str | None:
    """The one error every sample of every group failed with, else None."""
    errors = {group_error(r) for r in responses}
    return errors.pop() if len(errors) == 1 else None


Response = rollout_pb2.RunGroupResponse


def run_tasks(
    start: Callable[[str], Any],
    scenarios: list[str],
    concurrency: int,
    responses: dict[str, Response] | None = None,
    on_done: Callable[[str, Response], None] | None = None,
) -> dict[str, Response]:
    """Runs `concurrency` tasks at once (`start` gives a future of a RunGroupResponse).
    Stops, cancelling the rest, once the first EARLY_STOP_TASKS tasks all failed every
    sample with the same error: the rest would too (a policy that breaks every call).
    `responses` is filled as tasks finish, `on_done` told of each: what a run stopped
    midway (eval_progress.Stopped) has."""
    done: queue.Queue[str] = queue.Queue()
    running: dict[str, Any] = {}
    responses = {} if responses is None else responses
    waiting = list(scenarios)
    try:
        while waiting or running:
            while waiting and len(running) < concurrency:
                scenario = waiting.pop(0)
                running[scenario] = start(scenario)
                running[scenario].add_done_callback(lambda _, s=scenario: done.put(s))
            scenario = done.get()
            responses[scenario] = running.pop(scenario).result()
            if on_done is not None:
                on_done(scenario, responses[scenario])
            error = common_error(list(responses.values()))
            if error and len(responses) >= EARLY_STOP_TASKS and (waiting or running):
                fail(
                    f"stopped after {len(responses)} of {len(scenarios)} tasks: every sample "
                    f"failed with the same error: {error}",
                    1,
                )
    finally:
        for future in running.values():
            future.cancel()
    return {s: responses[s] for s in scenarios}


@app.command("run")
def run(
    base_url: str | None = BaseUrlOpt,
    model: str = typer.Option(
        ..., help="model the endpoint serves: a base model, a checkpoint name@step or name@best"
    ),
    env: str = EnvOpt,
    split: str = typer.Option(
        default_of(JobSpecModel, "eval_split"), help="the split whose tasks are evaluated"
    ),
    k: int = typer.Option(
        default_of(JobSpecModel, "eval_k"), min=1, max=256, help="samples per task"
    ),
    max_tasks: int = typer.Option(
        default_of(JobSpecModel, "eval_max_tasks"), min=0, help="first N tasks; 0 = all"
    ),
    api_key_env: str = typer.Option(
        "", help="variable in the rollout service's environment holding the endpoint's key"
    ),
    temperature: float | None = TemperatureOpt,
    max_turns: int | None = MaxTurnsOpt,
    max_tokens: int | None = MaxTokensOpt,
    enable_thinking: bool | None = EnableThinkingOpt,
    reward: str | None = RewardOpt,
    concurrency: int = typer.Option(4, min=1, max=256, help="tasks run at once"),
    out: Path | None = typer.Option(None, help="folder for summary.json and trajectories/"),
    timeout_s: float = typer.Option(1800.0, min=1, help="how long to wait for one task"),
    target: str = RolloutTargetOpt,
    token: str = TokenOpt,
) -> None:
    """Evaluate a policy: mean reward, success rate, avg@k, pass@k and a per-task table.
    Checks first that the endpoint serves the model (exit 2 if not, 1 if it cannot be
    reached); exits 1 with the cause when no task returned a sample, stopping early when
    the first tasks all failed with the same error. Progress: a line per finished task on
    stderr when the output is not a terminal. SIGINT or SIGTERM: the finished tasks are
    written to --out as partial results (partial.json), exit 130 or 143."""
    base_url = policy_url(base_url)
    spec = job_defaults(
        dict(
            environment=env,
            max_turns=max_turns,
            temperature=temperature,
            max_tokens=max_tokens,
            enable_thinking=enable_thinking,
            reward=parse_reward(reward) if reward is not None else None,
        )
    )
    check_model_name(model)
    check_base_url(base_url)
    start = time.monotonic()
    run = EvalRun()
    with stopped_by_signals():
        try:
            with service(target, token, "rollout service") as channel:
                stub = rollout_pb2_grpc.RolloutStub(channel)
                info = stub.DescribeEnvironment(
                    rollout_pb2.DescribeEnvironmentRequest(name=env), timeout=30
                )
                run.scenarios = eval_tasks(info, split, max_tasks)
                spec = with_default_reward(spec, info.agent)
                run.served_as = check_policy(stub, base_url, model, api_key_env)

                def one(scenario: str) -> Any:
                    task = build_task(
                        spec,
                        scenario,
                        rollouts=k,
                        model_base_url=base_url,
                        policy=model,
                        model_api_key_env=api_key_env,
                    )
                    request = rollout_pb2.RunGroupRequest(task=task)
                    return stub.RunGroup.future(request, timeout=timeout_s)

                with TaskProgress(len(run.scenarios)) as progress:
                    run_tasks(one, run.scenarios, concurrency, run.responses, progress.done)
        except Stopped as stop:
            run.stopped = stop
    summary = _summary(run, k=k, split=split, model=model, seconds=time.monotonic() - start)
    _report(run, summary, out, model)


@dataclass
class EvalRun:
    """What `eval run` has: its tasks, those finished, and the signal that stopped it."""

    scenarios: list[str] = field(default_factory=list)
    responses: dict[str, Response] = field(default_factory=dict)
    served_as: str = ""
    stopped: Stopped | None = None

    def finished(self) -> dict[str, Response]:
        """The finished tasks, in the tasks' order."""
        return {s: self.responses[s] for s in self.scenarios if s in self.responses}


def _summary(run: EvalRun, *, k: int, split: str, model: str, seconds: float) -> pb.EvalSummary:
    if run.stopped is not None and not run.responses:
        fail(
            f"stopped by {run.stopped.signal_name} before any task finished", run.stopped.exit_code
        )
    responses = run.finished()
    results = [evaluation.task_result(s, r.group) for s, r in responses.items()]
    summary = evaluation.summarize(results, k=k, split=split, policy=model, seconds=seconds)
    # Which checkpoint `name@best` (or a plain name) was: what the answers named.
    trajectories = (t for r in responses.values() for t in r.group.trajectories)
    summary.served_policy = evaluation.served_policy(run.served_as, trajectories)
    return summary


def _report(run: EvalRun, summary: pb.EvalSummary, out: Path | None, model: str) -> None:
    """The outputs (--out) and the tables; a stopped run's as partial results, exiting
    with the signal's code (130 for SIGINT, 143 for SIGTERM)."""
    responses = run.finished()
    if out is not None:
        write_outputs(out, summary, responses)
        (out / PARTIAL_FILE).unlink(missing_ok=True)  # a stopped run's, from before
        if run.stopped is not None:
            not_done = [s for s in run.scenarios if s not in responses]
            mark_partial(out, run.stopped, list(responses), not_done)
    render.console.print(summary_table(summary))
    render.console.print(render.eval_line(summary))
    if summary.served_policy and summary.served_policy != model:
        render.console.print(f"{model} answered as {summary.served_policy}", markup=False)
    if run.stopped is not None:
        where = f", written to {out} ({PARTIAL_FILE} says so)" if out is not None else ""
        print(
            f"stopped by {run.stopped.signal_name}: partial results, {len(responses)} of "
            f"{len(run.scenarios)} tasks{where}",
            file=sys.stderr,
        )
        raise SystemExit(run.stopped.exit_code)
    if not any(r.samples for r in summary.results):
        fail(f"no sample came back: {common_error(list(responses.values())) or 'see above'}", 1)


METRICS = ("success", "pass_at_k", "reward")


@app.command("compare")
def compare(
    evaluations: list[Path] = typer.Argument(
        ..., help="2 or more evaluations (--out folders or summary.json); the first is the baseline"
    ),
    metric: str = typer.Option("success", help="per-task score: success | pass_at_k | reward"),
    resamples: int = typer.Option(2000, min=100, max=1_000_000, help="bootstrap resamples"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON record per evaluation"),
) -> None:
    """Each evaluation against the first (the baseline) on the tasks both ran: a row per
    evaluation with its score, the mean delta and its paired bootstrap 95% interval, the
    paired and dropped tasks. With two: the per-task deltas and a sign test too."""
    if metric not in METRICS:
        fail(f"--metric must be success, pass_at_k or reward, not {metric!r}")
    if len(evaluations) < 2:
        fail("eval compare needs a baseline and at least one evaluation to compare with it")
    summaries = [load_summary(path) for path in evaluations]
    baseline = summaries[0]
    results = [
        evaluation.compare(baseline, other, metric=metric, resamples=resamples)
        for other in summaries[1:]
    ]
    for path, result in zip(evaluations[1:], results, strict=True):
        if not result.rows:
            fail(f"{path} shares no task with the baseline {evaluations[0]}")
    records = compare_records(evaluations, summaries, results)
    if as_json:
        render.print_json(records)
        return
    if len(results) == 1:
        _pairwise(results[0], baseline, summaries[1], evaluations)
    _models_table(records, metric)


def _label(policy: str, served: str, path: str) -> str:
    """What an evaluation ran: its policy as typed, with the checkpoint the answers named."""
    shown = policy or path
    return f"{shown} ({served})" if served and served != shown else shown


def compare_records(
    paths: list[Path], summaries: list[pb.EvalSummary], results: list[evaluation.Comparison]
) -> list[dict[str, Any]]:
    """One record per evaluation; the baseline's scored on its own tasks."""
    base = summaries[0]
    first = {
        "evaluation": str(paths[0]),
        "policy": base.policy,
        "served_policy": base.served_policy,
        "baseline": True,
        "metric": results[0].metric,
        "score": evaluation.mean_score(base, results[0].metric),
        "tasks": len(base.results),
    }
    records = [first]
    for path, summary, result in zip(paths[1:], summaries[1:], results, strict=True):
        records.append(
            {
                "evaluation": str(path),
                "policy": summary.policy,
                "served_policy": summary.served_policy,
                "baseline": False,
                "metric": result.metric,
                "score": result.mean_b,
                "baseline_score": result.mean_a,
                "delta": result.mean_delta,
                "ci95": list(result.ci95),
                "paired_tasks": len(result.rows),
                "dropped_tasks": {"only_baseline": result.only_a, "only_this": result.only_b},
                "wins": result.wins,
                "losses": result.losses,
                "ties": result.ties,
                "sign_p": result.sign_p,
            }
        )
    return records


def _models_table(records: list[dict[str, Any]], metric: str) -> None:
    """A row per evaluation (paths and policies whole: tab-separated when piped)."""
    rows = []
    for r in records:
        label = _label(r["policy"], r["served_policy"], r["evaluation"])
        score = f"{r['score']:.3f}"
        if r["baseline"]:
            rows.append([r["evaluation"], label, score, "baseline", "-", str(r["tasks"])])
            continue
        low, high = r["ci95"]
        ci = f"{low:+.3f} .. {high:+.3f}"
        delta = f"{r['delta']:+.3f}"
        rows.append([r["evaluation"], label, score, delta, ci, str(r["paired_tasks"])])
    headers = ("evaluation", "policy", metric, "delta vs baseline", "95% CI", "paired tasks")
    render.listing(headers, rows, ("evaluation", "policy"))
    for r in records[1:]:
        only_base, only_this = (len(v) for v in r["dropped_tasks"].values())
        if only_base + only_this:
            render.console.print(
                f"{r['evaluation']}: {only_base + only_this} task(s) not in both, left out "
                f"of the pairing (only in the baseline: {only_base}, only here: {only_this})",
                markup=False,
                soft_wrap=True,
            )


def _pairwise(
    result: evaluation.Comparison, first: pb.EvalSummary, second: pb.EvalSummary, paths: list[Path]
) -> None:
    """Two evaluations: the per-task deltas (B - A) and a sign test."""
    metric = result.metric
    table = Table("task", f"A {metric}", f"B {metric}", "delta")
    for row in result.rows:
        table.add_row(row.scenario_id, f"{row.a:.3f}", f"{row.b:.3f}", f"{row.delta:+.3f}")
    render.console.print(table)
    low, high = result.ci95
    lines = (
        f"A: {_label(first.policy, first.served_policy, str(paths[0]))} · "
        f"B: {_label(second.policy, second.served_policy, str(paths[1]))} · "
        f"{len(result.rows)} shared tasks",
        f"mean delta {result.mean_delta:+.3f} (95% CI {low:+.3f} .. {high:+.3f}, "
        "paired bootstrap over tasks)",
        f"wins {result.wins} / losses {result.losses} / ties {result.ties}",
        f"sign test p = {result.sign_p:.4f}",
    )
    for line in lines:
        render.console.print(line, markup=False, soft_wrap=True)
    for side, missing in (("A", result.only_a), ("B", result.only_b)):
        if missing:
            render.console.print(f"only in {side}: {', '.join(missing)}", markup=False)
