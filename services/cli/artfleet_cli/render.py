"""How jobs and progress look in a terminal (rich)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from itertools import pairwise
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column, Table

from artfleet.contracts import failures
from artfleet.v1 import common_pb2 as pb

console = Console(highlight=False)


def state_name(state: int) -> str:
    return pb.JobState.Name(state).removeprefix("JOB_STATE_")


def job_state(job: pb.Job) -> str:
    """The job's state, and what a plain SUCCEEDED would hide."""
    return state_name(job.state) + (" (trained nothing)" if job.trained_nothing else "")


def _loss(s: pb.StepSummary) -> str:
    # No trainable sequence (equal rewards in every group) means no loss to show.
    return f"{s.loss:+.4f}" if s.trained_sequences else "-"


def scoring_note(s: pb.StepSummary) -> str:
    """What the reward's scorers failed on in the step ("" when nothing did)."""
    if not s.scorer_errors:
        return ""
    groups = "group" if s.scorer_errors == 1 else "groups"
    lost = ", every group lost: SCORING FAILED" if s.scoring_failed else ""
    return f"scorer errors in {s.scorer_errors} {groups}{lost} ({s.scorer_error})"


def failed_episodes(s: pb.StepSummary, what: str = "") -> str:
    """ "6/8 (6 AssertionError)", or with `what` "6/8 episodes failed (6 AssertionError)":
    the step's failed episodes by type ("" when none)."""
    if not s.episodes_failed:
        return ""
    kinds = failures.breakdown(Counter(dict(s.episode_failures)))
    return f"{s.episodes_failed}/{s.episodes}{what} ({kinds})"


def mismatch_note(s: pb.StepSummary) -> str:
    """The step's sampler/trainer mismatch in short ("" when not measured): the KL
    estimate, the importance ratio's p1-p99 and its share outside [0.5, 2], the engine
    that sampled and, when off-policy, the policy lag."""
    if not s.HasField("mismatch"):
        return ""
    m = s.mismatch
    lag = f", lag {s.staleness_mean:.2g}" if s.staleness_max else ""
    return (
        f"mismatch k3 {m.k3:.2g}, ratio {m.ratio_p1:.2f}-{m.ratio_p99:.2f}, "
        f"{m.outside_0_5_2:.1%} outside [0.5, 2] ({m.engine}{lag})"
    )


def step_line(s: pb.StepSummary) -> str:
    note = scoring_note(s)
    failed = failed_episodes(s, " episodes failed")
    mismatch = mismatch_note(s)
    return (
        f"step {s.step}: reward {s.reward_mean:+.3f} ± {s.reward_std:.3f} · "
        f"turns {s.turns_mean:.1f} · {s.trajectories} trajectories · "
        + (f"{failed} · " if failed else "")
        + f"loss {_loss(s)} · {s.step_seconds:.0f}s "
        f"(rollouts {s.rollout_seconds:.0f}s, train {s.train_seconds:.0f}s)"
        + (f" · {mismatch}" if mismatch else "")
        + (f" · {note}" if note else "")
        + (
            f" · waited {s.policy_wait_seconds:.0f}s for the policy"
            if s.policy_wait_seconds
            else ""
        )
    )


def failure_warning_line(s: pb.StepSummary) -> str:
    """A step that lost more than the trainer's share of its episodes, and to what."""
    return f"step {s.step}: {s.failure_warning}"


JOB_COLUMNS = ("id", "name", "experiment", "config", "state", "steps", "policy", "created")


def job_row(job: pb.Job) -> list[str]:
    state = job_state(job)
    if job.queue_position:
        state += f" #{job.queue_position}"
    return [
        job.id,
        job.spec.name,
        job.spec.experiment or "default",
        job.config_hash or "-",
        state,
        f"{job.completed_steps}/{job.spec.steps}",
        job.policy or "-",
        job.created_at.ToDatetime().strftime("%Y-%m-%d %H:%M:%S"),
    ]


def table(headers: Sequence[str], rows: list[list[str]], ids: Collection[str]) -> Table:
    """A rich table whose id columns are never wrapped or cut (they are copied)."""
    columns = [
        Column(h, no_wrap=True, min_width=max((len(r[i]) for r in rows), default=len(h)))
        if h in ids
        else Column(h)
        for i, h in enumerate(headers)
    ]
    result = Table(*columns)
    for row in rows:
        result.add_row(*row)
    return result


def listing(
    headers: Sequence[str],
    rows: list[list[str]],
    ids: Collection[str] = ("id",),
    out: Console | None = None,
) -> None:
    """A table on a terminal wide enough for its whole ids; else (piped, narrow) one
    tab-separated line per row, nothing cut."""
    out = out or console
    id_width = sum(len(r[i]) + 3 for r in rows[:1] for i, h in enumerate(headers) if h in ids)
    if out.is_terminal and out.width >= id_width + 4 * (len(headers) - len(ids)):
        out.print(table(headers, rows, ids))
        return
    for row in (headers, *rows):  # past rich: no tab expansion, highlighting or cropping
        print("\t".join(cell.replace("\t", " ") for cell in row), file=out.file)


def print_json(records: list[dict[str, Any]]) -> None:
    print(json.dumps(records, indent=2))


def message_records(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Proto messages as JSON objects, field names as in the proto, defaults included."""
    return [
        json_format.MessageToDict(
            m, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        for m in messages
    ]


def jobs_table(jobs: Iterable[pb.Job]) -> Table:
    return table(JOB_COLUMNS, [job_row(job) for job in jobs], ("id", "policy"))


def summary_table(job: pb.Job) -> Table:
    table = Table(
        "step",
        "reward mean",
        "reward std",
        "turns",
        "trajectories",
        "trained seqs",
        "loss",
        "step time",
        "failed episodes",
        "scorer errors",
        "mismatch k3",
        "ratio ∉ [0.5, 2]",
        title=f"job {job.id}: {state_name(job.state)}",
    )
    for s in job.steps:
        errors = f"{s.scorer_errors}{' (all)' if s.scoring_failed else ''}"
        table.add_row(
            str(s.step),
            f"{s.reward_mean:+.3f}",
            f"{s.reward_std:.3f}",
            f"{s.turns_mean:.1f}",
            str(s.trajectories),
            str(s.trained_sequences),
            _loss(s),
            f"{s.step_seconds:.0f}s",
            escape(failed_episodes(s) or "-"),
            errors if s.scorer_errors else "-",
            *_mismatch_cells(s),
        )
    return table


def _mismatch_cells(s: pb.StepSummary) -> tuple[str, str]:
    if not s.HasField("mismatch"):
        return "-", "-"
    return f"{s.mismatch.k3:.2g}", f"{s.mismatch.outside_0_5_2:.1%}"


_EIGHTHS = " ▁▂▃▄▅▆▇█"


def _columns(values: Sequence[float], width: int) -> list[float]:
    """At most `width` values: consecutive runs averaged when there are more."""
    if len(values) <= width:
        return list(values)
    edges = [round(i * len(values) / width) for i in range(width + 1)]
    return [sum(values[a:b]) / (b - a) for a, b in pairwise(edges)]


def bar_chart(values: Sequence[float], *, height: int = 4, width: int = 24) -> list[str]:
    """A small bar chart in block characters, one column per value (runs averaged past
    `width` columns); bars rise from min(0, lowest) to the highest value, labelled on the
    left. [] for no values."""
    if not values:
        return []
    cols = _columns(values, width)
    low, high = min(0.0, *cols), max(0.0, *cols)
    span = (high - low) or 1.0
    eighths = [round((v - low) / span * height * 8) for v in cols]
    labels = [f"{high:+.2f}", f"{low:+.2f}"]
    pad = max(map(len, labels))
    # Few values: 2-wide bars a space apart; many: 1-wide, touching.
    bar, gap = (2, " ") if len(cols) <= 12 else (1, "")
    lines = []
    for row in range(height):
        base = (height - 1 - row) * 8
        cells = gap.join(_EIGHTHS[max(0, min(8, e - base))] * bar for e in eighths)
        label = labels[0] if row == 0 else labels[1] if row == height - 1 else ""
        lines.append(f"{label:>{pad}} {'┤' if label else '│'}{cells}".rstrip())
    return lines


def reward_chart(steps: Sequence[pb.StepSummary]) -> list[str]:
    """The training reward per step as a few lines of bars (the console draws the larger
    chart)."""
    values = [s.reward_mean for s in steps]
    if not values:
        return []
    first, last = steps[0], steps[-1]
    title = (
        f"training reward per step ({first.step}-{last.step}): "
        f"{first.reward_mean:.2f} -> {last.reward_mean:.2f}"
    )
    return [title, *bar_chart(values)]


def job_details(job: pb.Job) -> None:
    queued = f" (queue position {job.queue_position})" if job.queue_position else ""
    console.print(
        f"job {job.id} ({job.spec.name}): {job_state(job)}{queued}, "
        f"{job.completed_steps}/{job.spec.steps} steps, policy {job.policy or '-'}, "
        f"experiment {job.spec.experiment or 'default'}, config {job.config_hash or '-'}"
    )
    if job.error:
        console.print(f"[red]error:[/red] {job.error}")
    if job.trained_nothing:
        console.print(
            "[yellow]warning:[/yellow] no step trained a sequence (every group's "
            "rewards were equal): the checkpoints are the starting policy"
        )
    for resume in job.resumes:
        console.print(resume_line(resume), markup=False)  # an error's text is not markup
    if job.steps:
        console.print(summary_table(job))
    failing = next((s for s in reversed(job.steps) if s.scorer_errors), None)
    if failing is not None:  # the table has no room for the message itself
        console.print(f"[yellow]step {failing.step}:[/yellow] {escape(scoring_note(failing))}")
    losing = next((s for s in reversed(job.steps) if s.failure_warning), None)
    if losing is not None:
        console.print(f"[yellow]warning:[/yellow] {escape(failure_warning_line(losing))}")
    drifting = next((s for s in reversed(job.steps) if s.mismatch.warning), None)
    if drifting is not None:
        line = f"step {drifting.step}: {drifting.mismatch.warning}"
        console.print(f"[yellow]warning:[/yellow] {escape(line)}")
    if job.evals:
        console.print(evals_table(job.evals))
    if job.HasField("sft"):
        console.print(sft_status_line(job.sft))


def resume_line(r: pb.JobResume) -> str:
    """One `jobs resume`: what the job was then, its reason included."""
    when = f"{r.time.ToDatetime():%Y-%m-%d %H:%M:%S} UTC" if r.HasField("time") else "-"
    reason = f": {r.error}" if r.error else ""
    return f"resumed {when} after step {r.completed_steps}, was {state_name(r.state)}{reason}"


def sft_line(s: pb.SftProgress) -> str:
    if s.done:
        losses = " → ".join(f"{v:.4f}" for v in s.epoch_losses) or "-"
        return f"sft done: {s.batches} batches, checkpoint {s.checkpoint_step}, epoch loss {losses}"
    return (
        f"sft epoch {s.epoch}/{s.epochs} batch {s.batch}/{s.batches}: "
        f"loss {s.loss:.4f} · lr {s.learning_rate:.2g} · grad norm {s.grad_norm:.3f}"
    )


def sft_status_line(s: pb.SftStatus) -> str:
    state = "done" if s.done else ("running" if s.started else "pending")
    losses = " → ".join(f"{v:.4f}" for v in s.epoch_losses) or "-"
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(s.skipped.items())) or "none"
    at = f", checkpoint {s.checkpoint_step}" if s.done else ""
    return (
        f"sft: {state}{at}, {s.samples} samples per epoch (skipped: {skipped}), "
        f"{s.batches} batches, epoch loss {losses}"
    )


def eval_line(e: pb.EvalSummary) -> str:
    return (
        f"eval @ step {e.step} ({e.split}, {e.tasks} tasks, k={e.k}): "
        f"reward {e.reward_mean:+.3f} · success {e.success_rate:.1%} · "
        f"avg@{e.k} {e.avg_at_k:.3f} · pass@{e.k} {e.pass_at_k:.3f}"
    )


def evals_table(evals: Iterable[pb.EvalSummary]) -> Table:
    table = Table("step", "split", "tasks", "k", "reward", "success", "avg@k", "pass@k", "time")
    for e in evals:
        table.add_row(
            str(e.step),
            e.split,
            str(e.tasks),
            str(e.k),
            f"{e.reward_mean:+.3f}",
            f"{e.success_rate:.1%}",
            f"{e.avg_at_k:.3f}",
            f"{e.pass_at_k:.3f}",
            f"{e.seconds:.0f}s",
        )
    return table


def follow(events: Iterable[pb.ProgressEvent], total_steps: int) -> int:
    """Shows a progress bar and a line per step; returns the final job state."""
    final = pb.JOB_STATE_UNSPECIFIED
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("training", total=total_steps)
        for event in events:
            if event.kind == pb.EVENT_KIND_STEP_STARTED:
                progress.update(bar, description=f"step {event.step}/{event.total_steps}")
            elif event.kind == pb.EVENT_KIND_STEP_DONE:
                # A scorer's message may hold brackets ([Errno 111]): not rich markup.
                progress.console.print(escape(step_line(event.summary)))
                if event.summary.failure_warning:
                    line = escape(failure_warning_line(event.summary))
                    progress.console.print(f"[yellow]warning:[/yellow] {line}")
                progress.update(bar, completed=event.step)
            elif event.kind == pb.EVENT_KIND_EVAL:
                progress.console.print(eval_line(event.eval))
            elif event.kind == pb.EVENT_KIND_SFT:
                progress.console.print(sft_line(event.sft))
            elif event.kind == pb.EVENT_KIND_STATE:
                final = event.state
                note = f": {event.message}" if event.message else ""
                progress.console.print(f"job {state_name(event.state)}{note}")
            elif event.kind == pb.EVENT_KIND_LOG:  # e.g. bad records a job left out
                progress.console.print(escape(event.message))
    return final
