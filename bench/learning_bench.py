"""Learning benchmark: does a training job make its policy better on held-out tasks, on
several seeds, and is that as good as the committed baseline?

    python bench/learning_bench.py [--n-seeds 3 | --seeds 7,1,2] [--engine vllm|torch]
        [--baseline-commit SHA] [--steps 4] [--groups 8] [--rollouts 8] [--lr 5e-4] ...
    python bench/learning_bench.py --seed 7 ...    # one run of one seed (what each run is)

One run (`--seed`): on a real local fleet (redis-server, Celery rollout worker, sandbox,
reward, trainer with SmolLM2-135M-Instruct; the policy served by vLLM or the trainer's
torch server) one GRPO job with that seed trains on `math-single`'s train split
(answer_check reward) and evaluates itself on the whole held-out `test` split (50
problems, 10 per difficulty) with `eval_k` samples per task at `eval_temperature` (0 =
greedy): before step 1 (the base policy) and after the last step (the trained LoRA). Both
are the job's own in-training evals: same tasks, k, temperature, sampling seeds, prompt
and checker. A task's score is its success rate over its k samples. Last lines:
`heldout_base=` / `heldout_trained=` (mean task score, %), `heldout_gain=` (points),
`heldout_gain_ci95=lo,hi` (paired bootstrap over tasks), the sign test, the settings.

Several seeds (the default, seeds 1-3): each seed is one run of the above, a subprocess of
this checkout's own bench file. With `--baseline-commit` that commit is checked out into a
temporary `git worktree` and its own bench file runs the same seed after each of ours
(ours seed 1, its seed 1, ours seed 2, ...) so the machine's load falls on both alike; the
Mann-Whitney U test (exact, two-sided) compares the two commits' per-seed gains. Last
lines: `learning_gain_seed<S>=` per seed, `learning_gain_mean=`, and
`learning_vs_baseline=` (the mean over bench/baselines/learning.json's accepted mean).
Exit 1 when the mean is below the baseline's lower bound (checked only where the setting
is the baseline's). The defaults are `artfleet demo`'s setting: 4 steps x 8 groups x 8
rollouts, lr 5e-4, greedy k=1 evaluation on the 50 test problems, vLLM; a seed takes about
4-5 minutes on 2 quiet CPU cores, so 3 seeds about 15 minutes (twice that with a baseline
commit). Not run by pytest; its pure part (learning_stats.py) is unit-tested. Why the base
fails and what is learned: docs/learning.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import learning_runs
from learning_stats import UsageError, pick_seeds

from artfleet.contracts import evaluation
from artfleet.runtime.rpc.client import sync_channel
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet
from artfleet_cli.fleet_config import ConfigError, parse_sets
from artfleet_cli.fleet_up import pick_engine

BASELINE_FILE = Path(__file__).resolve().parent / "baselines" / "learning.json"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--environment", default="math-single")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--groups", type=int, default=8, help="groups (train tasks) per step")
    p.add_argument("--rollouts", type=int, default=8, help="samples per group")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--temperature", type=float, default=0.7, help="of training samples")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--eval-k", type=int, default=1)
    p.add_argument("--eval-temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--eval-max-tasks", type=int, default=0, help="0 = the whole split")
    p.add_argument("--task-prompt", default="", help="'' = the environment's own prompt")
    p.add_argument("--engine", default="vllm", help="vllm, torch or auto: who serves the policy")
    p.add_argument("--resamples", type=int, default=10_000)
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a fleet setting, as `artfleet demo --set` (ARTFLEET_INFERENCE_POLICY_MODE=lora)",
    )
    p.add_argument("--seed", type=int, default=None, help="one run of this seed")
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default 1,2,3)")
    p.add_argument("--n-seeds", type=int, default=None, help="seeds 1..N (default 3)")
    p.add_argument("--baseline-commit", default=None, help="also run this commit's bench")
    p.add_argument("--baseline-file", type=Path, default=BASELINE_FILE)
    p.add_argument(
        "--runner",
        choices=("bench", "demo"),
        default="bench",
        help="what runs a seed on each side: this bench file, or `artfleet demo` (the same "
        "job; for a --baseline-commit older than the multi-seed bench)",
    )
    p.add_argument(
        "--write-baseline",
        action="store_true",
        help="accept this run's figures into --baseline-file (the old ones kept as earlier)",
    )
    return p


def job_spec(args: argparse.Namespace) -> JobSpecModel:
    return JobSpecModel.model_validate(
        dict(
            name="learning-bench",
            experiment="learning-bench",
            environment=args.environment,
            steps=args.steps,
            groups_per_step=args.groups,
            rollouts_per_group=args.rollouts,
            learning_rate=args.lr,
            temperature=args.temperature,
            max_tokens=args.max_tokens,
            max_turns=1,
            seed=args.seed,
            task_prompt=args.task_prompt,
            reward=[{"name": "answer_check"}],
            # The eval before step 1 and the one after the last step, nothing between.
            eval_every_steps=args.steps,
            eval_split="test",
            eval_k=args.eval_k,
            eval_temperature=args.eval_temperature,
            eval_max_tasks=args.eval_max_tasks,
            gather_timeout_s=3600,
        )
    )


def run_job(stub: trainer_pb2_grpc.TrainerStub, spec: JobSpecModel) -> pb.Job:
    job = stub.SubmitJob(trainer_pb2.SubmitJobRequest(spec=spec_to_proto(spec)))
    start = time.monotonic()
    for event in stub.WatchJob(trainer_pb2.WatchJobRequest(job_id=job.id), timeout=4 * 3600):
        elapsed = time.monotonic() - start
        if event.kind == pb.EVENT_KIND_STEP_DONE:
            s = event.summary
            print(
                f"step={s.step} reward_mean={s.reward_mean:.3f} step_s={s.step_seconds:.0f} "
                f"elapsed_s={elapsed:.0f}",
                flush=True,
            )
        elif event.kind == pb.EVENT_KIND_EVAL:
            e = event.eval
            print(
                f"eval step={e.step} success={e.success_rate:.3f} pass@{e.k}={e.pass_at_k:.3f} "
                f"tasks={e.tasks} eval_s={e.seconds:.0f} elapsed_s={elapsed:.0f}",
                flush=True,
            )
    job = stub.GetJob(trainer_pb2.GetJobRequest(job_id=job.id))
    if job.state != pb.JOB_STATE_SUCCEEDED:
        raise SystemExit(f"job ended {pb.JobState.Name(job.state)}: {job.error}")
    return job


def gain_by_prefix(result: evaluation.Comparison) -> dict[str, float]:
    """Mean paired gain (points) per scenario-id prefix (`d1-007` -> `d1`), sorted."""
    deltas: dict[str, list[float]] = {}
    for row in result.rows:
        deltas.setdefault(row.scenario_id.split("-")[0], []).append(row.delta)
    return {key: 100 * sum(d) / len(d) for key, d in sorted(deltas.items())}


def report(job: pb.Job, args: argparse.Namespace, wall_s: float) -> None:
    evals = {e.step: e for e in job.evals}
    base, trained = evals[0], evals[args.steps]
    result = evaluation.compare(base, trained, metric="success", resamples=args.resamples)
    for difficulty, gain in gain_by_prefix(result).items():
        print(f"heldout_gain_{difficulty}={gain:+.1f}")
    low, high = result.ci95
    print(f"heldout_tasks={len(result.rows)} heldout_k={args.eval_k}")
    print(f"heldout_base_pass_at_k={100 * base.pass_at_k:.1f}")
    print(f"heldout_trained_pass_at_k={100 * trained.pass_at_k:.1f}")
    print(f"heldout_wins={result.wins} heldout_losses={result.losses} heldout_ties={result.ties}")
    print(f"heldout_sign_p={result.sign_p:.4f}")
    mismatch_lines(job)
    print(f"settings={learning_runs.settings_line(args)},seed={args.seed}")
    print(f"wall_seconds={wall_s:.0f}")
    print(f"heldout_base={100 * base.success_rate:.1f}")
    print(f"heldout_trained={100 * trained.success_rate:.1f}")
    print(f"heldout_gain={100 * result.mean_delta:+.1f}")
    print(f"heldout_gain_ci95={100 * low:+.1f},{100 * high:+.1f}")


def mismatch_lines(job: pb.Job) -> None:
    """The sampler/trainer mismatch (docs/training.md), token-weighted over the job's steps:
    what the engine served against what the trainer scored."""
    steps = [s.mismatch for s in job.steps if s.HasField("mismatch") and s.mismatch.tokens]
    if not steps:
        print("mismatch=none (no step recorded sampler logprobs)")
        return
    tokens = sum(m.tokens for m in steps)
    print(f"mismatch_engine={steps[0].engine} mismatch_tokens={tokens}")
    for name in ("abs_delta_mean", "k3", "outside_0_9_1_1", "outside_0_5_2"):
        value = sum(getattr(m, name) * m.tokens for m in steps) / tokens
        print(f"mismatch_{name}={value:.6f}")
    print(f"mismatch_ratio_p1_min={min(m.ratio_p1 for m in steps):.4f}")
    print(f"mismatch_ratio_p99_max={max(m.ratio_p99 for m in steps):.4f}")
    print(f"mismatch_abs_delta_p99_max={max(m.abs_delta_p99 for m in steps):.6f}")


def run_one(args: argparse.Namespace) -> None:
    """One job of one seed on a fleet of its own."""
    start = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="learning-bench-"))
    fleet = LocalFleet(workdir, api=False, engine=pick_engine(args.engine))
    fleet.settings = parse_sets(args.set)
    line = learning_runs.settings_line(args)
    sets = " ".join(args.set)
    print(f"settings={line},seed={args.seed} sets={sets!r} workdir={fleet.workdir}", flush=True)
    fleet.start(fleet.own_settings().fleet_start_timeout_s)  # vLLM's start when loaded
    try:
        channel = sync_channel(fleet.trainer_target, fleet.token)
        job = run_job(trainer_pb2_grpc.TrainerStub(channel), job_spec(args))
        channel.close()
    finally:
        fleet.stop()
    # The fleet's files (~150 MB a seed: checkpoints, logs) stay only where the job failed
    shutil.rmtree(fleet.workdir, ignore_errors=True)
    report(job, args, time.monotonic() - start)


def main() -> None:
    p = parser()
    args = p.parse_args()
    try:
        parse_sets(args.set)
    except ConfigError as exc:
        p.error(str(exc))
    if args.seed is not None:
        if args.seeds is not None or args.n_seeds is not None or args.baseline_commit:
            p.error("--seed is one run: not with --seeds, --n-seeds or --baseline-commit")
        run_one(args)
        return
    try:
        seeds = pick_seeds(args.seeds, args.n_seeds)
    except UsageError as exc:
        p.error(str(exc))
    if args.write_baseline and len(seeds) < 2:
        p.error("--write-baseline: a baseline needs at least 2 seeds")
    args.engine = pick_engine(args.engine)  # the setting names the engine that ran
    raise SystemExit(learning_runs.run_seeds(args, seeds))


if __name__ == "__main__":
    main()
