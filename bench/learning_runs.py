"""The learning bench over several seeds (bench/learning_bench.py): each seed one run of a
checkout's own bench file in a subprocess, ours and (with --baseline-commit) the baseline
commit's from a temporary `git worktree`, alternated seed by seed; then the summary lines,
the rank test and the check against bench/baselines/learning.json."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from learning_stats import (
    Measured,
    Record,
    Verdict,
    check,
    demo_gain_from_output,
    demo_unfit,
    gain_from_output,
    interleave,
    load_baseline,
    mann_whitney,
    mean,
    new_baseline,
    pythonpath,
    sample_sd,
)

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path("bench") / "learning_bench.py"
# The setting a gain belongs to: each key an option of the bench (`lr` is `--lr`).
SETTING_KEYS = (
    "environment",
    "steps",
    "groups",
    "rollouts",
    "lr",
    "temperature",
    "max_tokens",
    "eval_k",
    "eval_temperature",
    "eval_max_tasks",
    "task_prompt",
    "engine",
)


def setting(args: argparse.Namespace) -> dict[str, Any]:
    return {key: getattr(args, key) for key in SETTING_KEYS}


def settings_line(args: argparse.Namespace) -> str:
    return ",".join(f"{key}={value!r}" for key, value in setting(args).items())


def flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def child_args(args: argparse.Namespace, seed: int) -> list[str]:
    """One run's command-line options: the setting, the seed, the bootstrap's resamples."""
    values = {**setting(args), "seed": seed, "resamples": args.resamples}
    given = [part for key, value in values.items() for part in (flag(key), str(value))]
    return given + [part for item in args.set for part in ("--set", item)]


def usage_exit(message: str) -> NoReturn:
    print(f"learning_bench: {message}", file=sys.stderr)
    raise SystemExit(2)


def demo_args(args: argparse.Namespace, seed: int, workdir: Path) -> list[str]:
    """`artfleet demo`'s options for the setting (learning_stats.DEMO_FIXED: what it fixes)."""
    values = {
        "steps": args.steps,
        "groups-per-step": args.groups,
        "rollouts-per-group": args.rollouts,
        "learning-rate": args.lr,
        "eval-k": args.eval_k,
        "eval-temperature": args.eval_temperature,
        "seed": seed,
        "engine": args.engine,
        "workdir": workdir,
    }
    given = [part for key, value in values.items() for part in (f"--{key}", str(value))]
    return given + [part for item in args.set for part in ("--set", item)]


def run_seed(root: Path, label: str, seed: int, args: argparse.Namespace) -> float:
    """One run of `root`'s own bench (or its `artfleet demo`, --runner demo) on `seed`, its
    output passed through with a prefix; returns its gain (points)."""
    with tempfile.TemporaryDirectory(prefix="learning-bench-demo-") as workdir:
        if args.runner == "demo":
            command = [sys.executable, "-m", "artfleet_cli.main", "demo"]
            command += demo_args(args, seed, Path(workdir))
        else:
            command = [sys.executable, str(root / BENCH), *child_args(args, seed)]
        output = stream(command, root, f"[{label} seed={seed}] ")
    if output.returncode != 0:
        raise SystemExit(f"{label} seed {seed}: the run exited {output.returncode} (above)")
    parse = demo_gain_from_output if args.runner == "demo" else gain_from_output
    return parse(output.text)


@dataclass
class Output:
    returncode: int
    text: str


def stream(command: list[str], root: Path, prefix: str) -> Output:
    env = {**os.environ, "PYTHONPATH": pythonpath(root)}
    lines = []
    with subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print(prefix + line, end="", flush=True)
            lines.append(line)
    return Output(process.returncode, "".join(lines))


def git(*command: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *command], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip() or f"git {' '.join(command)} failed")
    return done.stdout.strip()


@contextlib.contextmanager
def baseline_tree(commit: str) -> Iterator[tuple[Path, str]]:
    """`commit` checked out (detached) in a temporary worktree, removed afterwards."""
    try:
        sha = git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    except RuntimeError:
        usage_exit(f"--baseline-commit: {commit!r} is not a commit of this repository")
    where = Path(tempfile.mkdtemp(prefix="learning-bench-baseline-"))
    tree = where / "tree"
    git("worktree", "add", "--detach", str(tree), sha)
    try:
        yield tree, sha
    finally:
        with contextlib.suppress(RuntimeError):
            git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(where, ignore_errors=True)


def require_options(tree: Path, args: argparse.Namespace) -> None:
    """The baseline commit's bench must take every option a run is given (older ones have
    no --engine or --eval-temperature: they would run another setting, so they are refused)."""
    if not (tree / BENCH).is_file():
        usage_exit(f"--baseline-commit: it has no {BENCH}")
    env = {**os.environ, "PYTHONPATH": pythonpath(tree)}
    done = subprocess.run(
        [sys.executable, str(tree / BENCH), "--help"], cwd=tree, env=env, capture_output=True
    )
    text = done.stdout.decode(errors="replace")
    missing = [f for f in child_args(args, 0)[::2] if f not in text]
    if done.returncode != 0 or missing:
        usage_exit(
            f"--baseline-commit: its {BENCH} does not take {', '.join(missing) or '--help'}, "
            "so it cannot run this setting; pick a commit whose bench has the multi-seed form"
        )


def run_seeds(args: argparse.Namespace, seeds: list[int]) -> int:
    """Every seed, alternated with the baseline commit's where one is given; the summary;
    the exit code (1: the mean is below the baseline file's lower bound)."""
    start = time.monotonic()
    try:
        baseline = load_baseline(args.baseline_file)
    except (OSError, ValueError) as exc:
        usage_exit(f"--baseline-file: {args.baseline_file}: {exc}")
    if args.runner == "demo" and (unfit := demo_unfit(setting(args))):
        usage_exit(f"--runner demo: artfleet demo fixes {unfit} (its own values differ)")
    print(f"settings={settings_line(args)} seeds={','.join(map(str, seeds))}", flush=True)
    gains: dict[str, dict[int, float]] = {"main": {}, "baseline": {}}
    with contextlib.ExitStack() as stack:
        roots = {"main": ROOT}
        if args.baseline_commit:
            tree, sha = stack.enter_context(baseline_tree(args.baseline_commit))
            if args.runner == "bench":
                require_options(tree, args)
            roots["baseline"] = tree
            print(f"baseline_commit={sha} worktree={tree}", flush=True)
        for side, seed in interleave(seeds, "baseline" in roots):
            gains[side][seed] = run_seed(roots[side], side, seed, args)
    gain_mean = mean(list(gains["main"].values()))
    verdict = check(gain_mean, setting(args), baseline.accepted)
    summary(args, gains, gain_mean, baseline.accepted, verdict, time.monotonic() - start)
    if args.write_baseline:
        write_baseline(args, gains["main"])
    return 0 if verdict.passed else 1


def summary(
    args: argparse.Namespace,
    gains: dict[str, dict[int, float]],
    gain_mean: float,
    baseline: Record,
    verdict: Verdict,
    wall_s: float,
) -> None:
    ours, theirs = gains["main"], gains["baseline"]
    if theirs:
        for seed, gain in theirs.items():
            print(f"learning_baseline_commit_gain_seed{seed}={gain:+.1f}")
        their_mean = mean(list(theirs.values()))
        test = mann_whitney(list(ours.values()), list(theirs.values()))
        print(f"learning_baseline_commit_gain_mean={their_mean:+.1f}")
        if their_mean:
            print(f"learning_vs_baseline_commit={gain_mean / their_mean:.2f}")
        print(f"learning_mann_whitney_u={test.u_a:g} learning_mann_whitney_p={test.p:.3f}")
    print(f"settings={settings_line(args)}")
    print(f"wall_seconds={wall_s:.0f}")
    print(f"learning_baseline_mean={baseline.mean:+.1f}")
    print(f"learning_baseline_lower_bound={baseline.lower_bound:+.1f}")
    if verdict.checked:
        print(f"learning_check={'pass' if verdict.passed else 'FAIL: below the lower bound'}")
    else:
        print(f"learning_check=skipped (not the baseline's setting: {verdict.differences})")
    for seed, gain in ours.items():
        print(f"learning_gain_seed{seed}={gain:+.1f}")
    print(f"learning_gain_sd={sample_sd(list(ours.values())):.1f}")
    print(f"learning_gain_mean={gain_mean:+.1f}")
    print(f"learning_vs_baseline={verdict.ratio:.2f}")


def write_baseline(args: argparse.Namespace, gains: dict[int, float]) -> None:
    """This run's figures accepted into the baseline file (the old accepted kept earlier)."""
    commit = git("rev-parse", "HEAD")
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += " with uncommitted changes"
    load = os.getloadavg()[0]
    measured = Measured(
        commit=commit,
        date=datetime.datetime.now(datetime.UTC).date().isoformat(),
        machine=f"{platform.machine()}, {os.cpu_count()} CPUs, 1-min load {load:.1f} at the end",
        how="bench/learning_bench.py " + " ".join(sys.argv[1:]),
    )
    record = Record(
        setting=setting(args),
        gains=gains,
        mean=round(mean(list(gains.values())), 2),
        measured=measured,
    )
    updated = new_baseline(load_baseline(args.baseline_file), record)
    args.baseline_file.write_text(updated.model_dump_json(indent=2) + "\n")
    print(f"baseline written: {args.baseline_file}", flush=True)
