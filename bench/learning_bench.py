"""Learning benchmark: does a training job make its policy better on held-out tasks?

    python bench/learning_bench.py [--steps 12] [--groups 8] [--rollouts 8] [--lr 3e-4] ...

On a real local fleet (redis-server, Celery rollout worker, sandbox, reward, trainer with
the torch backend and SmolLM2-135M-Instruct) one GRPO job trains on `math-single`'s train
split (answer_check reward) and evaluates itself on the whole held-out `test` split (50
problems, 10 per difficulty) with `eval_k` samples per task: before step 1 (the base
policy) and after the last step (the trained LoRA). Both evaluations are the job's own
in-training evals: same tasks, same k, same temperature, same sampling seed, same prompt,
same checker (the scenario's answer check, recorded by the rollout as `check_passed`).

A task's score is its success rate over its k samples. Last lines:
`heldout_base=` / `heldout_trained=` (mean task score, %), `heldout_gain=` (points),
`heldout_gain_ci95=lo,hi` (paired bootstrap over tasks, points), the sign test, the wall
time and the settings. Not run by pytest; on 2 shared CPU cores it takes tens of minutes.

Why the base fails (read from sampled completions, 48 tokens, T=0.7): SmolLM2-135M
explains ("To find 8 + 3, we need to add the numbers ...") and is cut off by the token
budget before the result, so the checker's last number is an operand or an intermediate
value; when it answers in one sentence ("1 + 1 is simply 2.") it is often right. What
GRPO can learn here in a few steps is the answer format: short replies that end with the
result. The tuning log is in docs/learning.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from artfleet.contracts import evaluation
from artfleet.runtime.rpc.client import sync_channel
from artfleet.specs.job import JobSpecModel, spec_to_proto
from artfleet.v1 import common_pb2 as pb
from artfleet.v1 import trainer_pb2, trainer_pb2_grpc
from artfleet_cli.fleet import LocalFleet


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--environment", default="math-single")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--groups", type=int, default=8, help="groups (train tasks) per step")
    parser.add_argument("--rollouts", type=int, default=8, help="samples per group")
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--eval-k", type=int, default=4)
    parser.add_argument("--eval-max-tasks", type=int, default=0, help="0 = the whole split")
    parser.add_argument("--task-prompt", default="", help="'' = the environment's own prompt")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--resamples", type=int, default=10_000)
    return parser.parse_args()


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
    print(f"settings={settings_line(args)}")
    print(f"wall_seconds={wall_s:.0f}")
    print(f"heldout_base={100 * base.success_rate:.1f}")
    print(f"heldout_trained={100 * trained.success_rate:.1f}")
    print(f"heldout_gain={100 * result.mean_delta:+.1f}")
    print(f"heldout_gain_ci95={100 * low:+.1f},{100 * high:+.1f}")


def settings_line(args: argparse.Namespace) -> str:
    return (
        f"env={args.environment},steps={args.steps},groups={args.groups},"
        f"rollouts={args.rollouts},lr={args.lr:g},temperature={args.temperature:g},"
        f"max_tokens={args.max_tokens},eval_k={args.eval_k},seed={args.seed},"
        f"task_prompt={args.task_prompt or '(environment)'!r}"
    )


def main() -> None:
    args = parse_args()
    start = time.monotonic()
    fleet = LocalFleet(Path(tempfile.mkdtemp(prefix="learning-bench-")), api=False)
    print(f"settings={settings_line(args)} workdir={fleet.workdir}", flush=True)
    fleet.start()
    try:
        channel = sync_channel(fleet.trainer_target, fleet.token)
        job = run_job(trainer_pb2_grpc.TrainerStub(channel), job_spec(args))
        channel.close()
    finally:
        fleet.stop()
    report(job, args, time.monotonic() - start)


if __name__ == "__main__":
    main()
